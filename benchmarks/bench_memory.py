"""Peak memory and step time of train.py with and without --gradient_checkpointing (and LoRA), in one invocation.

Each configuration is a fresh `python train.py` (one ZeRO-3 rank) on the CPU default for --steps steps; its peak
resident memory is the process's own ru_maxrss (read by a wrapper process, so runs never share a maximum), its step
times are metrics.jsonl's time/step and time/train. Ratios are against the first configuration (full fine-tuning).

    python benchmarks/bench_memory.py [--steps 2] [--configs full,full_gc,lora,lora_gc] [--results ...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

CONFIGS = {"full": [], "full_gc": ["--gradient_checkpointing"], "lora": ["--lora_r", "16", "--lora_alpha", "32"],
           "lora_gc": ["--lora_r", "16", "--lora_alpha", "32", "--gradient_checkpointing"]}
# Runs train.py as its only child and prints that child's peak RSS (KiB on Linux).
WRAPPER = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
           "print('MAXRSS_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")


def run_config(name: str, flags: list, steps: int, extra: list) -> dict:
    out = tempfile.mkdtemp(prefix=f"bench_memory_{name}_")
    cmd = [sys.executable, "-c", WRAPPER, sys.executable, "train.py", "--output_dir", out, "--max_steps", str(steps),
           "--no_final_export", "--log_completions", "0", "--seed", "1234", *extra, *flags]
    env = dict(os.environ, PYTHONPATH=REPO, TOKENIZERS_PARALLELISM="false")
    load_before = os.getloadavg()[0]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(out, ignore_errors=True)
        raise SystemExit(f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    rss = int(next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("MAXRSS_KIB")))
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    with open(os.path.join(out, "config.json")) as f:
        dtype = json.load(f)["flags"]["dtype"]
    shutil.rmtree(out, ignore_errors=True)  # a full checkpoint of the default model is 1.6 GB
    return {"flags": flags, "peak_rss_gib": rss / 2 ** 20, "dtype": dtype,
            "load_avg_1min": [load_before, os.getloadavg()[0]],
            "step_s": [r["time/step"] for r in rows], "train_s": [r["time/train"] for r in rows],
            "actor_loss": [r["actor/loss"] for r in rows]}


def report(result: dict) -> str:
    runs, base = result["runs"], next(iter(result["runs"].values()))
    lines = [f"# Memory and step time: {', '.join(runs)} ({result['model']}, {result['steps']} steps each)",
             "", f"CPU: {result['cpu']} ({result['cores']} cores; bf16 matmul: {result['bf16_isa']}); torch "
             f"{result['torch']}; dtype {base['dtype']}; one ZeRO-3 rank; the CPU default's batch (8 prompts x 4 "
             "samples, 32 new tokens). Step time is the mean over the steps after the first (the first includes "
             "warm-up) when there are several.", "",
             "| config | flags | peak RSS (GiB) | RSS vs full | step (s) | train phase (s) | train vs full "
             "| load avg (start, end) |", "|---|---|---|---|---|---|---|---|"]

    def mean_after_first(xs):
        xs = xs[1:] or xs
        return sum(xs) / len(xs)
    for name, r in runs.items():
        step, train = mean_after_first(r["step_s"]), mean_after_first(r["train_s"])
        lines.append(f"| {name} | {' '.join(r['flags']) or '(defaults)'} | {r['peak_rss_gib']:.2f} | "
                     f"{r['peak_rss_gib'] / base['peak_rss_gib']:.2f} | {step:.1f} | {train:.1f} | "
                     f"{train / mean_after_first(base['train_s']):.2f} | "
                     f"{r['load_avg_1min'][0]:.1f}, {r['load_avg_1min'][1]:.1f} |")
    lines += ["", "The load average is the machine's (shared with other jobs): where it exceeds the core count, the "
              "times are stretched by other work and only the ratios of runs under similar load mean much.",
              "", "Peak RSS is the whole process: weights, Adam state, DeepSpeed buffers and activations; "
              "checkpointing cuts only the decoder layers' saved activations (not the full-vocabulary logits, which "
              "dominate at 49,152 tokens), so the saving grows with sequence length and micro-batch. Re-run: "
              "`python benchmarks/bench_memory.py`.", ""]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=2, help="training steps per configuration")
    p.add_argument("--configs", default="full,full_gc", help=f"comma list from {','.join(CONFIGS)}")
    p.add_argument("--model_name_or_path", default=None, help="default: credo's default model")
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "memory"))
    a = p.parse_args()
    import torch
    from benchmarks.results_io import cpu_model, write_results
    from rl.engine.hardware import cpu_bf16_matmul_isa
    from rl.engine.models import DEFAULT_MODEL_NAME
    extra = ["--model_name_or_path", a.model_name_or_path] if a.model_name_or_path else []
    runs = {}
    for name in a.configs.split(","):
        print(f"[bench_memory] {name}", flush=True)
        runs[name] = run_config(name, CONFIGS[name], a.steps, extra)
    result = {"model": a.model_name_or_path or DEFAULT_MODEL_NAME, "steps": a.steps, "cpu": cpu_model(),
              "cores": os.cpu_count(), "bf16_isa": cpu_bf16_matmul_isa() or "none", "torch": torch.__version__,
              "runs": runs}
    write_results(result, a.results, report)


if __name__ == "__main__":
    main()
