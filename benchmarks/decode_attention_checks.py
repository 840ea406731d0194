"""The checks behind rl/engine/decode_attention.py's numbers (session 32), on the CPU default model and
bench_rollout_engines' workload (32 prompts x 48 new tokens, temperature 0.7):

    .venv/bin/python benchmarks/decode_attention_checks.py sdpa_calls   # SDPA's seconds per decode call, bf16 and fp32
    .venv/bin/python benchmarks/decode_attention_checks.py logp_gap     # recorded log-probs vs the training forwards
    .venv/bin/python benchmarks/decode_attention_checks.py padded_ab    # one-query vs SDPA on a left-padded batch
    .venv/bin/python benchmarks/decode_attention_checks.py update_profile  # where a bf16 forward + backward goes
    .venv/bin/python benchmarks/decode_attention_checks.py fp32_gaps    # fp32: the loop's gap vs the trainer's own

sdpa_calls times every torch SDPA call inside one real decode call (the loop with the model's own attention);
logp_gap samples 4 seeds with each attention in bf16 and compares the recorded log-probs with the bf16 and the fp32
training forward on the same tokens (mean, 99th percentile and largest |difference|, means over seeds);
padded_ab alternates the two attentions 3 times on packed weights with 7 tokens of left padding on half the rows;
update_profile is torch.profiler's table for one bf16 forward + backward at the main job's shape (8 rows x 72
tokens, left-padded); fp32_gaps (issue #64 item 2's exactness) samples 4 seeds in fp32 with the plain and the
packed loop and compares their recorded log-probs with the training forward at 8 rows a forward, beside how far the
training forward itself moves when only its batch shape changes (32 rows or 1 row a forward, or the update's own
length-sorted, trimmed micro-batches). The timed ones are read as ratios of one run (the machine's load moves them).
"""
import argparse
import contextlib
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [REPO]:
    sys.path.insert(0, REPO)


def _model(dtype_name: str):
    import torch
    from transformers import AutoModelForCausalLM

    from benchmarks.bench_vs_trl import MODEL
    return AutoModelForCausalLM.from_pretrained(MODEL, dtype={"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]).eval()


def sdpa_calls():
    import torch.nn.functional as F

    from benchmarks.bench_rollout_engines import workload
    from benchmarks.bench_vs_trl import MAX_NEW, MODEL, TEMPERATURE
    from rl.rollout.decode import sample_batch
    _, ids, mask, _, _ = workload(MODEL)
    original = F.scaled_dot_product_attention
    for dtype in ("bf16", "fp32"):
        model, spent = _model(dtype), {"decode": [0, 0.0], "prefill": [0, 0.0]}

        def timed(q, *args, **kwargs):
            start = time.perf_counter()
            out = original(q, *args, **kwargs)
            entry = spent["decode" if q.shape[2] == 1 else "prefill"]
            entry[0] += 1
            entry[1] += time.perf_counter() - start
            return out
        F.scaled_dot_product_attention = timed
        try:
            start = time.perf_counter()
            sample_batch(model, ids, mask, MAX_NEW, [-1], TEMPERATURE, attention="sdpa")  # EOS ignored
            total = time.perf_counter() - start
        finally:
            F.scaled_dot_product_attention = original
        calls, seconds = spent["decode"]
        print(f"{dtype}: {calls} one-token SDPA calls, {1e3 * seconds / calls:.2f} ms each, {seconds:.2f} of the "
              f"call's {total:.2f} s")


def logp_gap(seeds: int = 4):
    import torch

    from benchmarks.bench_rollout_engines import workload
    from benchmarks.bench_vs_trl import MAX_NEW, MODEL, TEMPERATURE
    from rl.rollout.decode import sample_batch_with_signals
    from rl.update.batching import batched_response_logprobs
    tok, ids, mask, _, eos = workload(MODEL)
    model, fp32 = _model("bf16"), _model("fp32")
    rows = {}
    for seed in range(seeds):
        for attention in ("sdpa", "one_query"):
            torch.manual_seed(seed)
            out, recorded = sample_batch_with_signals(model, ids, mask, MAX_NEW, eos, TEMPERATURE, signals={"logp"},
                                                      attention=attention)
            width = max(len(r) for r in out)
            response = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in out])
            kept = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in out])
            full, full_mask = torch.cat([ids, response], 1), torch.cat([mask, kept], 1)
            with torch.no_grad():
                forwards = {"bf16 training forward": batched_response_logprobs(model, full, full_mask, ids.shape[1],
                                                                               TEMPERATURE, micro=8).float(),
                            "fp32 forward": batched_response_logprobs(fp32, full, full_mask, ids.shape[1],
                                                                      TEMPERATURE, micro=8).float()}
            got = torch.tensor([s.logp + [0.0] * (width - len(s.logp)) for s in recorded])
            if attention == "sdpa":  # on SDPA's samples: how far bf16 training itself is from fp32
                rows.setdefault(("bf16 training forward", "fp32 forward"), []).append(_gap(
                    forwards["bf16 training forward"], forwards["fp32 forward"], kept))
            for name, want in forwards.items():
                rows.setdefault((attention, name), []).append(_gap(got, want, kept))
    for (attention, name), values in rows.items():
        t = torch.tensor(values)
        print(f"{attention} vs {name}: mean |diff| {t[:, 0].mean():.4f}, p99 {t[:, 1].mean():.3f}, max "
              f"{t[:, 2].mean():.3f} (means over {seeds} seeds; worst max {t[:, 2].max():.3f})")


def _gap(got, want, kept) -> tuple:
    """(mean, 99th percentile, max) |got - want| over the response tokens."""
    gap = (got - want)[kept.bool()].abs()
    return gap.mean().item(), gap.quantile(0.99).item(), gap.max().item()


def padded_ab(repeats: int = 3):
    import torch

    from benchmarks.bench_rollout_engines import workload
    from benchmarks.bench_vs_trl import MAX_NEW, MODEL, TEMPERATURE
    from rl.engine.packed_linear import PackedLinears
    from rl.rollout.decode import sample_batch
    tok, ids, mask, _, _ = workload(MODEL)
    pad = torch.full((ids.shape[0], 7), tok.pad_token_id, dtype=ids.dtype)
    ids, mask = torch.cat([pad, ids], 1), torch.cat([torch.zeros_like(pad), mask], 1)
    ids[::2, :7], mask[::2, :7] = ids[::2, 7:14], 1  # half the rows 7 tokens longer: the rest left-padded
    model, packs = _model("bf16"), PackedLinears()

    def seconds(attention):
        with packs.applied(model, len(ids)):
            start = time.perf_counter()
            sample_batch(model, ids, mask, MAX_NEW, [-1], TEMPERATURE, attention=attention)
            return time.perf_counter() - start
    seconds("sdpa"), seconds("one_query")  # warm-up
    times = {"sdpa": [], "one_query": []}
    for _ in range(repeats):
        for attention in times:
            times[attention].append(seconds(attention))
    print({k: [round(x, 2) for x in v] for k, v in times.items()},
          f"one_query / sdpa {sum(times['one_query']) / sum(times['sdpa']):.3f}")


def update_profile():
    import torch
    from torch.profiler import ProfilerActivity, profile

    from rl.update.batching import response_logprobs
    model = _model("bf16").train()
    torch.manual_seed(0)
    rows, prompt, response = 8, 48, 24
    ids = torch.randint(100, 40000, (rows, prompt + response))
    mask = torch.ones_like(ids)
    mask[::2, :9] = 0

    def step():
        out = response_logprobs(model, ids, mask, prompt, 0.7)
        (out[0] if isinstance(out, tuple) else out).float().sum().backward()
        model.zero_grad(set_to_none=True)
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def fp32_gaps(seeds: int = 4):
    import torch

    from benchmarks.bench_rollout_engines import workload
    from benchmarks.bench_vs_trl import MAX_NEW, MODEL, TEMPERATURE
    from rl.engine.packed_linear import PackedLinears
    from rl.rollout.decode import sample_batch_with_signals
    from rl.update.batching import batched_response_logprobs, micro_batches, response_logprobs
    tok, ids, mask, _, eos = workload(MODEL)
    model, packs, rows = _model("fp32"), PackedLinears(), {}
    for seed in range(seeds):
        for loop in ("plain", "packed"):
            torch.manual_seed(seed)
            with packs.applied(model, len(ids)) if loop == "packed" else contextlib.nullcontext():
                out, recorded = sample_batch_with_signals(model, ids, mask, MAX_NEW, eos, TEMPERATURE,
                                                          signals={"logp"})
            width = max(len(r) for r in out)
            response = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in out])
            kept = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in out])
            full, full_mask = torch.cat([ids, response], 1), torch.cat([mask, kept], 1)
            with torch.no_grad():
                forward = {micro: batched_response_logprobs(model, full, full_mask, ids.shape[1], TEMPERATURE, micro)
                           for micro in (8, 32, 1)}
                update = torch.zeros_like(forward[8])  # the update's layout: sorted by length, each part trimmed
                for mb in micro_batches(full_mask, ids.shape[1], 8):
                    part_ids, part_mask = mb.sequences(full, full_mask)
                    update[mb.rows, :mb.resp_len] = response_logprobs(model, part_ids, part_mask, mb.prompt_len,
                                                                      TEMPERATURE)[0]
            got = torch.tensor([s.logp + [0.0] * (width - len(s.logp)) for s in recorded])
            rows.setdefault(f"{loop} loop's recorded vs the training forward (8 rows a forward)", []).append(
                _gap(got, forward[8], kept))
            if loop == "plain":  # the trainer against itself, on the same tokens
                for name, other in (("32 rows a forward", forward[32]), ("1 row a forward", forward[1]),
                                    ("the update's sorted, trimmed micro-batches", update)):
                    rows.setdefault(f"training forward, {name}, vs 8 rows a forward", []).append(
                        _gap(other, forward[8], kept))
    for name, values in rows.items():
        t = torch.tensor(values)
        print(f"{name}: mean |diff| {t[:, 0].mean():.1e}, p99 {t[:, 1].mean():.1e}, max {t[:, 2].mean():.1e} "
              f"(means over {seeds} seeds; worst max {t[:, 2].max():.1e})")


CHECKS = {"sdpa_calls": sdpa_calls, "logp_gap": logp_gap, "padded_ab": padded_ab, "update_profile": update_profile,
          "fp32_gaps": fp32_gaps}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("check", choices=CHECKS)
    CHECKS[p.parse_args(argv).check]()


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        main()
