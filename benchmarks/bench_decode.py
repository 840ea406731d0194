"""Rollout generation: credo's decode loop (rl/rollout/decode.py) vs transformers' `generate`, same model, prompts, settings.

One process, the CPU default model in fp32, the 32 prompts of one bench_vs_trl step (8 single-digit arith prompts x 4),
at most 48 new tokens, temperature 0.7, no top-k/top-p. The two are interleaved repeat by repeat (machines are
noisy: the ratio of medians from one run is the number to read). Also checks that greedy decoding gives identical
tokens with both. Results: benchmarks/results/decode_loop.{json,md}.

    .venv/bin/python benchmarks/bench_decode.py --repeats 5
"""
import argparse
import os
import statistics
import sys
import time

import torch

from benchmarks.bench_envs import single_digit_rows
from benchmarks.bench_vs_trl import GROUP, MAX_NEW, MODEL, PROMPTS, TEMPERATURE, machine_info
from benchmarks.results_io import write_results
from rl.rollout.decode import sample_batch
from rl.rollout.tokens import encode_prompts, response_mask_from_ids

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hf_generate(model, ids, mask, max_new, eos, temperature):
    sampling = dict(do_sample=True, temperature=temperature, top_k=None, top_p=1.0) if temperature > 0 else \
        dict(do_sample=False, temperature=None, top_k=None, top_p=None)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, eos_token_id=eos,
                             pad_token_id=eos[0], use_cache=True, **sampling)[:, ids.shape[1]:]
    keep = response_mask_from_ids(out, eos).sum(-1).long().tolist()
    return [out[i, :keep[i]].tolist() for i in range(len(out))]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--model", default=MODEL)
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "decode_loop"))
    a = p.parse_args()
    from transformers import AutoModelForCausalLM

    from rl.engine.models import load_tokenizer
    torch.set_num_threads(a.threads)
    tok = load_tokenizer(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    rows = [r for r in single_digit_rows(PROMPTS, 0) for _ in range(GROUP)]
    ids, mask = encode_prompts(tok, [[{"role": "user", "content": r["prompt"]}] for r in rows], 256)
    eos = [tok.eos_token_id]
    machine = machine_info()

    greedy_hf = hf_generate(model, ids, mask, MAX_NEW, eos, 0.0)
    greedy_credo = sample_batch(model, ids, mask, MAX_NEW, eos, 0.0)
    identical = sum(a_ == b_ for a_, b_ in zip(greedy_hf, greedy_credo))

    runs = {"hf_generate": [], "credo": []}
    for rep in range(a.repeats + 1):  # repeat 0 warms both up and is not counted
        for name in runs:
            torch.manual_seed(rep)
            t0 = time.perf_counter()
            out = hf_generate(model, ids, mask, MAX_NEW, eos, TEMPERATURE) if name == "hf_generate" else \
                sample_batch(model, ids, mask, MAX_NEW, eos, TEMPERATURE)
            seconds = time.perf_counter() - t0
            if rep:
                runs[name].append({"seconds": seconds, "tokens": sum(len(r) for r in out),
                                   "max_len": max(len(r) for r in out)})
            print(f"repeat {rep} {name}: {seconds:.2f} s, {sum(len(r) for r in out)} tokens", flush=True)
    summary = {name: {"median_s": statistics.median(r["seconds"] for r in recs),
                      "tokens_per_s": sum(r["tokens"] for r in recs) / sum(r["seconds"] for r in recs)}
               for name, recs in runs.items()}
    machine["loadavg_end"] = os.getloadavg()
    result = {"command": " ".join([os.path.relpath(sys.executable, REPO), *sys.argv]), "machine": machine,
              "date": time.strftime("%Y-%m-%d %H:%M"), "batch": len(rows), "max_new_tokens": MAX_NEW,
              "temperature": TEMPERATURE, "greedy_identical_rows": identical, "runs": runs, "summary": summary}
    write_results(result, a.results, report)


def report(r: dict) -> str:
    m, s = r["machine"], r["summary"]
    lines = [f"# Rollout generation: credo's decode loop vs transformers generate ({r['date']})", "",
             f"Command: `{r['command']}`", "",
             f"Machine: {m['cpu']}, {m['cores']} cores; load average {m['loadavg_start'][0]:.2f} at start, "
             f"{m['loadavg_end'][0]:.2f} at end. torch {m['torch']}, transformers {m['transformers']}.", "",
             f"{r['batch']} prompts (one bench_vs_trl step), up to {r['max_new_tokens']} new tokens, temperature "
             f"{r['temperature']}, fp32, one process; interleaved repeats, each pair from the same seed.", "",
             "| decoder | median s | generated tokens/s | tokens per repeat |", "|---|---|---|---|"]
    for name, recs in r["runs"].items():
        lines.append(f"| {name} | {s[name]['median_s']:.2f} | {s[name]['tokens_per_s']:.1f} | "
                     f"{', '.join(str(x['tokens']) for x in recs)} |")
    lines += ["", f"Speed-up (median hf_generate / median credo): "
                  f"**{s['hf_generate']['median_s'] / s['credo']['median_s']:.2f}x**. Greedy decoding: "
                  f"{r['greedy_identical_rows']} of {r['batch']} rows token-identical."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
