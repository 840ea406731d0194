"""The actor's optimizer step on CPU: torch's AdamW as torch runs it by default on CPU tensors (its per-parameter
loop), with foreach, and fused (one kernel: what rl/engine/actor.py asks DeepSpeed for), on the default model's
parameters in fp32 (the master weights every dtype's optimizer updates), in one invocation, alternating.

    .venv/bin/python benchmarks/bench_optimizer_step.py --repeats 5

Each call times 3 optimizer steps after one warm-up step on fresh optimizer state; the median over repeats is
reported, with the largest difference of the weights after the timed steps from the loop's (the same update to float
rounding). Results: benchmarks/results/optimizer_step.{json,md}.
"""
import argparse
import os
import statistics
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [REPO]:
    sys.path.insert(0, REPO)

from benchmarks.results_io import cpu_model, write_results  # noqa: E402
from rl.engine.hardware import cpu_bf16_matmul_isa  # noqa: E402

MODES = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def timed_steps(params, grads, mode: str, steps: int = 3):
    """Seconds per optimizer step and the weights after `steps` + 1 steps from `params` (a fresh copy)."""
    weights = [p.detach().clone().requires_grad_() for p in params]
    for w, g in zip(weights, grads):
        w.grad = g
    opt = torch.optim.AdamW(weights, lr=2e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, **MODES[mode])
    opt.step()  # warm-up: the optimizer state is allocated here
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - t0) / steps, weights


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "optimizer_step"))
    a = p.parse_args()
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(q.shape, generator=gen) * 1e-3 for q in params]
    load_before = os.getloadavg()[0]
    seconds, gap = {m: [] for m in MODES}, {}
    for r in range(a.repeats):
        after = {}
        for mode in (list(MODES) if r % 2 == 0 else list(MODES)[::-1]):
            s, after[mode] = timed_steps(params, grads, mode)
            seconds[mode].append(s)
        for mode in MODES:
            gap[mode] = max(gap.get(mode, 0.0), max((x - y).abs().max().item()
                                                     for x, y in zip(after[mode], after["loop"])))
    result = {"cpu": cpu_model(), "bf16_isa": cpu_bf16_matmul_isa() or "none", "threads": torch.get_num_threads(),
              "torch": torch.__version__, "load_before": load_before, "load_after": os.getloadavg()[0],
              "parameters": sum(q.numel() for q in params), "tensors": len(params), "seconds": seconds,
              "median": {m: statistics.median(v) for m, v in seconds.items()}, "max_weight_gap": gap,
              "command": "python benchmarks/bench_optimizer_step.py " + " ".join(sys.argv[1:])}
    write_results(result, a.results, report)


def report(r: dict) -> str:
    base = r["median"]["loop"]
    lines = ["# The actor's optimizer step on CPU", "",
             f"`{r['command']}`: torch {r['torch']}, {r['cpu']} (bf16 matmul ISA: {r['bf16_isa']}), {r['threads']} "
             f"threads, load {r['load_before']:.2f} before and {r['load_after']:.2f} after; AdamW over "
             f"{r['parameters'] / 1e6:.1f}M fp32 parameters in {r['tensors']} tensors, modes alternating.", "",
             "| torch AdamW | median s/step | vs the loop | max weight gap to the loop |", "|---|---|---|---|"]
    for mode, s in r["median"].items():
        lines.append(f"| {mode} | {s:.3f} | {s / base:.2f}x | {r['max_weight_gap'][mode]:.1e} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
