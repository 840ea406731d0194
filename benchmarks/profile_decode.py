"""Where credo's decode loop spends one call: torch.profiler's operator table for one bench_rollout_engines call
(32 prompts x 48 new tokens, EOS ignored, temperature 0.7, the CPU default model), optionally on packed weights.

    .venv/bin/python benchmarks/profile_decode.py [--dtype fp32|bf16] [--packed] [--attention one_query|sdpa] [--rows 25]

Run it alone on the machine (its numbers are shares of one call's CPU time, read as such).
"""
import argparse
import contextlib
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [REPO]:
    sys.path.insert(0, REPO)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--packed", action="store_true", help="on prepacked weights (--cpu_packed_weights)")
    p.add_argument("--attention", choices=("one_query", "sdpa"), default="one_query",
                   help="the one-token steps' attention (--decode_attention; default: train.py's)")
    p.add_argument("--rows", type=int, default=25, help="operators shown")
    a = p.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoModelForCausalLM

    from benchmarks.bench_rollout_engines import workload
    from benchmarks.bench_vs_trl import MAX_NEW, MODEL, TEMPERATURE
    from rl.engine.packed_linear import PackedLinears
    from rl.rollout.decode import sample_batch
    tok, ids, mask, _, _ = workload(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype])
    packs = PackedLinears()

    def call():
        with packs.applied(model.eval(), len(ids)) if a.packed else contextlib.nullcontext():
            sample_batch(model, ids, mask, MAX_NEW, [-1], TEMPERATURE, attention=a.attention)  # EOS ignored
    call()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))


if __name__ == "__main__":
    main()
