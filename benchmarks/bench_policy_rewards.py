"""MAESTRO's `ppl` (NOVER's reference NLL): the full forward (rewards/policy_signals.reference_nll) against the forward
on the decode loop's kept KV cache (rewards/prefix_nll.cached_reference_nll), issue 21 item 4.

One process, the CPU default model in fp32, the 32 rows of one bench_scaling MAESTRO step (8 single-digit arith
prompts x 4, 48 new tokens, temperature 0.7), sampled once by the decode loop with the signals a MAESTRO run asks for
(entropy, hidden, prefix_kv). Then old and new alternate repeat by repeat on those same rows (the ratio of medians
is the number to read), and their values are compared. The decode loop's own cost of keeping the cache is timed
too: decode with and without "prefix_kv", alternating, same seed. Results: benchmarks/results/policy_rewards_cost.*

    .venv/bin/python benchmarks/bench_policy_rewards.py --repeats 5 --decode_repeats 2
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
from rewards.policy_signals import nover_example, reference_nll
from rewards.prefix_nll import cached_reference_nll, reusable_length
from rl.rollout.decode import sample_batch_with_signals
from rl.rollout.tokens import encode_prompts

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MICRO = 8  # train.py's default micro-batch for 32 responses per rank (rl/config.py DEFAULT_MAX_MICRO_BATCH)
SIGNALS = {"entropy", "hidden"}


def decode(model, ids, mask, eos, signals, seed):
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    responses, recorded = sample_batch_with_signals(model, ids, mask, MAX_NEW, eos, TEMPERATURE, signals=signals)
    return responses, recorded, time.perf_counter() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5, help="timed repeats of each ppl variant (after one warm-up)")
    p.add_argument("--decode_repeats", type=int, default=2, help="timed decode pairs with/without prefix_kv")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--model", default=MODEL)
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "policy_rewards_cost"))
    a = p.parse_args()
    from transformers import AutoModelForCausalLM

    from rl.engine.models import load_tokenizer
    torch.set_num_threads(a.threads)
    machine = machine_info()
    tok = load_tokenizer(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    rows = [r for r in single_digit_rows(PROMPTS, 0) for _ in range(GROUP)]
    ids, mask = encode_prompts(tok, [[{"role": "user", "content": r["prompt"]}] for r in rows], 256)
    eos = [tok.eos_token_id]

    decode_runs = {"without_prefix_kv": [], "with_prefix_kv": []}
    for rep in range(a.decode_repeats + 1):  # repeat 0 warms up and is not counted
        for name in decode_runs:
            signals = SIGNALS | ({"prefix_kv"} if name == "with_prefix_kv" else set())
            responses, recorded, seconds = decode(model, ids, mask, eos, signals, seed=rep)
            if rep:
                decode_runs[name].append(seconds)
            print(f"decode repeat {rep} {name}: {seconds:.2f} s", flush=True)

    prompts = [ids[i][mask[i].bool()].tolist() for i in range(len(rows))]
    texts = [tok.decode([t for t in r if t not in eos]) for r in responses]
    t0 = time.perf_counter()
    examples = [nover_example(tok, pr, c, r["answer"], "boxed") for pr, c, r in zip(prompts, texts, rows)]
    tokenise_s = time.perf_counter() - t0  # NOVER's retokenisation, shared by both variants
    contexts, targets = [c for c, _, _ in examples], [t for _, t, _ in examples]
    prefixes = [sig.prefix for sig in recorded]
    reuse = [reusable_length(pf, c) for pf, c in zip(prefixes, contexts)]
    full_tokens = sum(len(c) + len(t) for c, t in zip(contexts, targets))
    fed_tokens = sum(len(c) - m + len(t) for c, m, t in zip(contexts, reuse, targets))

    variants = {"full_forward": lambda: reference_nll(model, contexts, targets, tok.pad_token_id, "cpu", MICRO),
                "cached_prefix": lambda: cached_reference_nll(model, contexts, targets, prefixes, tok.pad_token_id,
                                                              "cpu", MICRO)}
    runs, values = {name: [] for name in variants}, {}
    for rep in range(a.repeats + 1):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            values[name] = fn()
            seconds = time.perf_counter() - t0
            if rep:
                runs[name].append(seconds)
            print(f"ppl repeat {rep} {name}: {seconds:.3f} s", flush=True)
    both = ~torch.isnan(values["full_forward"])
    gap = float((values["full_forward"][both] - values["cached_prefix"][both]).abs().max())
    median = {name: statistics.median(r) for name, r in runs.items()}
    machine["loadavg_end"] = os.getloadavg()
    result = {"command": " ".join([os.path.relpath(sys.executable, REPO), *sys.argv]), "machine": machine,
              "date": time.strftime("%Y-%m-%d %H:%M"), "rows": len(rows), "max_new_tokens": MAX_NEW, "micro": MICRO,
              "dtype": "fp32", "generated_tokens": sum(len(r) for r in responses),
              "rows_reusing_cache": sum(m > 0 for m in reuse), "tokens_full": full_tokens, "tokens_fed": fed_tokens,
              "max_abs_nll_gap": gap, "tokenise_s": tokenise_s, "ppl_runs_s": runs, "ppl_median_s": median,
              "speedup": median["full_forward"] / median["cached_prefix"],
              "decode_runs_s": decode_runs,
              "decode_median_s": {k: statistics.median(v) for k, v in decode_runs.items() if v}}
    write_results(result, a.results, report)


def report(r: dict) -> str:
    m = r["machine"]
    lines = [f"# MAESTRO `ppl`: full forward vs the decode loop's kept KV cache ({r['date']})", "",
             f"Command: `{r['command']}`", "",
             f"{m['cpu']}, {m['cores']} cores, bf16 ISA {m.get('bf16_isa')}, torch {m['torch']}, load average "
             f"{m['loadavg_start'][0]:.2f} at start, {m['loadavg_end'][0]:.2f} at end. {r['rows']} rows (8 prompts x 4), "
             f"{r['generated_tokens']} generated tokens, {r['dtype']}, micro-batch {r['micro']}.", "",
             "| ppl variant | median s | runs (s) |", "|---|---|---|"]
    for name, runs in r["ppl_runs_s"].items():
        lines.append(f"| {name} | {r['ppl_median_s'][name]:.3f} | {', '.join(f'{s:.3f}' for s in runs)} |")
    lines += ["", f"Speed-up {r['speedup']:.1f}x; {r['rows_reusing_cache']} of {r['rows']} rows reuse their cache; "
              f"tokens through the model {r['tokens_fed']} instead of {r['tokens_full']}; largest |NLL gap| "
              f"{r['max_abs_nll_gap']:.2e}. NOVER's retokenisation of the 32 rows (both variants): "
              f"{r['tokenise_s']:.3f} s.", ""]
    if r["decode_median_s"]:
        lines += ["Decode loop (entropy, hidden) with and without keeping the cache (prefix_kv), median s: " +
                  ", ".join(f"{k} {v:.2f}" for k, v in r["decode_median_s"].items()) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
