"""Step throughput of credo vs TRL's GRPOTrainer at matched settings, and where credo's step time goes.

One invocation runs, one after another on the same cores and for the same number of steps:
  - trl:          TRL GRPOTrainer (benchmarks/trl_grpo_runner.py), one process, torch threads = all cores;
  - trl-bf16:     the same with GRPOConfig(bf16=True);
  - credo-default: train.py under the `deepspeed` launcher, 1 rank, credo's default system flags (no
                  --actor_zero_stage, --dtype auto): what a user runs;
  - credo-1rank:  train.py under the `deepspeed` launcher, 1 rank, ZeRO-3, fp32, OMP threads = all cores;
  - credo-1rank-zero0: the same with --actor_zero_stage 0 (nothing to partition on one rank);
  - credo-2rank:  the same with 2 ranks (ZeRO-3), OMP threads = cores / 2 each, 4 prompts per rank.
Task: SmolLM2-135M-Instruct, single-digit arith prompts (benchmarks/bench_envs.py), 8 prompts x 4 completions per
step, at most 48 new tokens, temperature 0.7, lr 1e-5, beta 0, one update per batch, fp32 (except trl-bf16 and
credo-default). The first step of every runner is warm-up and is left out of the means.

The machine's limit (benchmarks/bench_limit.py): a matmul probe at the model's MLP shape in fp32 and bf16, measured
at the start of the same invocation, against each credo runner's train-phase FLOP/s (formula in bench_limit.py).
Generation is reported as generated tokens per second of the generate phase.

credo runs through benchmarks/credo_timed_train.py (train.py plus timers for log-probs, backward and optimizer
step; `--plain` runs train.py itself). Results: benchmarks/results/vs_trl.{json,md}.

    .venv/bin/pip install -r requirements-bench.txt
    .venv/bin/python benchmarks/bench_vs_trl.py --steps 6
"""
import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time

from benchmarks.bench_limit import limit_lines, measure_limit
from benchmarks.ports import free_port
from benchmarks.results_io import write_results
from rl.log.loggers import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct")
ENV = "benchmarks.bench_envs:SingleDigitArithEnv"
PROMPTS, GROUP, MAX_NEW, TEMPERATURE, LR = 8, 4, 48, 0.7, 1e-5
# credo's phase keys, in step order (logprobs/backward/optimizer_step are parts of train, from credo_timed_train.py)
PHASES = ("gather", "generate", "reward", "counterfactual", "train", "logprobs", "backward", "optimizer_step")
# credo runners: name -> (ranks, ZeRO stage, dtype); None leaves the flag at train.py's default. On one rank ZeRO-3
# partitions nothing but still copies each micro-batch's gradients into partitions (rl/engine/zero_config.py); stage 0 is
# the plain data-parallel engine.
CREDO_RUNNERS = {"credo-default": (1, None, None), "credo-1rank": (1, 3, "fp32"), "credo-1rank-zero0": (1, 0, "fp32"),
                 "credo-2rank": (2, 3, "fp32")}
TRL_RUNNERS = {"trl": "off", "trl-bf16": "on"}  # name -> --bf16
RUNNERS = (*TRL_RUNNERS, *CREDO_RUNNERS)


def _run(cmd, log, env):
    print("+ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env)
    if proc.returncode != 0:
        with open(log) as f:
            tail = f.read()[-3000:]
        raise SystemExit(f"command failed (exit {proc.returncode}); log {log}:\n{tail}")
    return time.time() - t0


def run_trl(out_dir, steps, seed, threads, gradient_checkpointing="off", model=MODEL, max_new=MAX_NEW, bf16="off"):
    """Per-step records of TRL's GRPOTrainer: [{step, seconds, tokens, phases}]."""
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "trl.json")
    cmd = [sys.executable, os.path.join(REPO, "benchmarks", "trl_grpo_runner.py"), "--model", model,
           "--steps", str(steps), "--prompts", str(PROMPTS), "--num_generations", str(GROUP),
           "--max_completion_length", str(max_new), "--temperature", str(TEMPERATURE), "--learning_rate", str(LR),
           "--threads", str(threads), "--seed", str(seed), "--gradient_checkpointing", gradient_checkpointing,
           "--bf16", bf16, "--out", out]
    wall = _run(cmd, os.path.join(out_dir, "trl.log"), dict(os.environ, OMP_NUM_THREADS=str(threads)))
    with open(out) as f:
        result = json.load(f)
    n = result["responses_per_step"]
    steps_out = [{"step": r["step"], "seconds": r["seconds"], "tokens": r.get("completions_mean_length", 0.0) * n,
                  "reward": r.get("reward"), "phases": r["phases"]} for r in result["records"]]
    return {"steps": steps_out, "wall_s": wall, "command": cmd, "versions": result["versions"]}


def run_credo(out_dir, steps, seed, ranks, threads, prompts_per_rank, extra=(), plain=False, zero_stage=3,
              max_new=MAX_NEW, group=GROUP, env=ENV, model=MODEL, dtype="fp32"):
    """Per-step records of credo's train.py: [{step, seconds, tokens, phases}] from metrics.jsonl.
    zero_stage / dtype None: train.py's default."""
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    script = "train.py" if plain else os.path.join("benchmarks", "credo_timed_train.py")
    deepspeed = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    cmd = [deepspeed, "--num_gpus", str(ranks), "--master_port", str(free_port()), script,
           "--model_name_or_path", model, "--env", env, "--algo", "grpo",
           *(["--actor_zero_stage", str(zero_stage)] if zero_stage is not None else []),
           *(["--dtype", dtype] if dtype is not None else []),
           "--max_answer_seq_len", str(max_new), "--temperature", str(TEMPERATURE),
           "--actor_learning_rate", str(LR), "--beta", "0", "--num_generations", str(group),
           "--per_device_generation_batch_size", str(prompts_per_rank), "--max_steps", str(steps),
           "--seed", str(seed), "--resume", "none", "--no_final_export", "--output_dir", out_dir, *extra]
    wall = _run(cmd, os.path.join(out_dir, "train.log"), dict(os.environ, OMP_NUM_THREADS=str(threads)))
    shutil.rmtree(os.path.join(out_dir, "checkpoints"), ignore_errors=True)  # ~2 GB of ZeRO state per run
    rows = read_metrics(os.path.join(out_dir, "metrics.jsonl"))
    responses = prompts_per_rank * ranks * group
    steps_out = [{"step": r["step"], "seconds": r["time/step"], "tokens": r["response_length/mean"] * responses,
                  "reward": r.get("reward/mean", r.get("reward/correctness/mean")),
                  "phases": {k[5:]: v for k, v in r.items() if k.startswith("time/") and k != "time/step"},
                  "counts": {k[6:]: v for k, v in r.items() if k.startswith("count/")}}
                 for r in rows]
    return {"steps": steps_out, "wall_s": wall, "command": cmd}


def summarise(run: dict, skip: int = 1) -> dict:
    """Means over the steps after the first `skip` (warm-up); falls back to all steps when there are no others."""
    steps = run["steps"][skip:] or run["steps"]
    seconds = sum(s["seconds"] for s in steps)
    tokens = sum(s["tokens"] for s in steps)
    phases, counts = {}, {}
    for s in steps:
        for k, v in s["phases"].items():
            phases[k] = phases.get(k, 0.0) + v / len(steps)
        for k, v in s.get("counts", {}).items():
            counts[k] = counts.get(k, 0.0) + v / len(steps)
    return {"counts": counts, "s_per_step": seconds / len(steps), "tokens_per_step": tokens / len(steps),
            "generated_tokens_per_s": tokens / max(seconds, 1e-9), "steps_measured": [s["step"] for s in steps],
            "step_seconds": [round(s["seconds"], 3) for s in steps], "phases": phases}


def machine_info() -> dict:
    import torch
    info = {"cpu": platform.processor(), "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                info["cpu"] = line.split(":", 1)[1].strip()
    except OSError:
        pass
    for name in ("transformers", "trl", "deepspeed", "accelerate"):
        try:
            info[name] = __import__(name).__version__
        except ImportError:
            info[name] = None
    from rl.engine.hardware import auto_dtype_name, cpu_bf16_matmul_isa
    info["bf16_isa"] = cpu_bf16_matmul_isa()
    info["auto_dtype"] = "%s (%s)" % auto_dtype_name(False)
    info["loadavg_start"] = os.getloadavg()
    return info


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6, help="steps per runner; the first is warm-up, not counted")
    p.add_argument("--runners", default=",".join(RUNNERS), help=f"comma list from {', '.join(RUNNERS)}")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="cores for each run (2 ranks: half each)")
    p.add_argument("--trl_gradient_checkpointing", choices=("on", "off"), default="off",
                   help="GRPOConfig's default is on; credo does not checkpoint, so off is the matched setting")
    p.add_argument("--plain", action="store_true", help="run train.py itself (no log-prob/backward/step timers)")
    p.add_argument("--credo_args", default="", help="extra train.py flags for every credo run (quoted string)")
    p.add_argument("--model", default=MODEL, help="HF model folder (default: the CPU default model; another one "
                                                     "only to smoke-test the script)")
    p.add_argument("--max_new_tokens", type=int, default=MAX_NEW)
    p.add_argument("--out", default=os.path.join(REPO, "output", "bench_vs_trl"))
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "vs_trl"),
                   help="writes RESULTS.json and RESULTS.md")
    a = p.parse_args()
    runners = [r.strip() for r in a.runners.split(",") if r.strip()]
    unknown = set(runners) - set(RUNNERS)
    if unknown:
        p.error(f"unknown runner(s) {sorted(unknown)}; choose from {RUNNERS}")
    if a.steps < 2:
        p.error("--steps must be >= 2 (the first step is warm-up)")
    if not os.path.exists(os.path.join(a.model, "config.json")):
        p.error(f"{a.model} not found: run `bash scripts/setup.sh` first")
    machine = machine_info()
    # the machine's limit, measured before the runners on the same cores (benchmarks/bench_limit.py)
    limit = measure_limit(a.model, a.threads)
    print("matmul probe: " + ", ".join(f"{p['dtype']} {p['flops_per_s'] / 1e9:.3g} GFLOP/s" for p in limit["probes"]),
          flush=True)
    extra = shlex.split(a.credo_args)
    runs = {}
    for name in runners:
        if name in TRL_RUNNERS:
            runs[name] = run_trl(os.path.join(a.out, name), a.steps, a.seed, a.threads, a.trl_gradient_checkpointing,
                                 a.model, a.max_new_tokens, bf16=TRL_RUNNERS[name])
        else:
            ranks, stage, dtype = CREDO_RUNNERS[name]
            runs[name] = run_credo(os.path.join(a.out, name), a.steps, a.seed, ranks, max(1, a.threads // ranks),
                                   PROMPTS // ranks, extra, a.plain, zero_stage=stage, max_new=a.max_new_tokens,
                                   model=a.model, dtype=dtype)
        runs[name]["summary"] = summarise(runs[name])
        s = runs[name]["summary"]
        print(f"{name}: {s['s_per_step']:.2f} s/step, {s['generated_tokens_per_s']:.1f} generated tokens/s "
              f"(steps {s['steps_measured']}: {s['step_seconds']})", flush=True)
    machine["loadavg_end"] = os.getloadavg()
    command = " ".join(shlex.quote(c) for c in [os.path.relpath(sys.executable, REPO), *sys.argv])
    result = {"command": command, "machine": machine, "date": time.strftime("%Y-%m-%d %H:%M"),
              "settings": {"model": os.path.relpath(a.model, REPO), "env": ENV, "prompts_per_step": PROMPTS,
                           "num_generations": GROUP, "max_new_tokens": a.max_new_tokens, "temperature": TEMPERATURE,
                           "learning_rate": LR, "beta": 0.0, "dtype": "fp32 (trl-bf16: bf16; credo-default: auto)",
                           "steps": a.steps, "warmup_steps": 1,
                           "trl_gradient_checkpointing": a.trl_gradient_checkpointing, "credo_args": a.credo_args},
              "limit": limit, "runs": runs}
    write_results(result, a.results, report)


def one_trl_dtype_note(ran: str, limit) -> str:
    """Why one TRL dtype may stand for "TRL's faster": the same invocation's matmul probe, where it was measured."""
    other = "trl-bf16" if ran == "trl" else "trl"
    probes = {p["dtype"]: p["flops_per_s"] / 1e9 for p in (limit or {}).get("probes", [])}
    if ran == "trl" and probes.get("bfloat16", 0) > 0 and probes.get("float32", 0) > probes["bfloat16"]:
        return (f"{other} was not run: on this CPU a bf16 matmul ran at {probes['bfloat16']:.3g} GFLOP/s against fp32's "
                f"{probes['float32']:.3g} (probe below), so fp32 is TRL's faster dtype here.")
    return f"Only {ran} was run: the faster of TRL's dtypes is not established by this invocation."


def report(result: dict) -> str:
    runs, m = result["runs"], result["machine"]
    trl_runs = [n for n in TRL_RUNNERS if n in runs]
    # the reference is TRL's faster dtype
    trl_best = min(trl_runs, key=lambda n: runs[n]["summary"]["s_per_step"]) if trl_runs else None
    trl = runs[trl_best]["summary"] if trl_best else None
    lines = [f"# credo vs TRL GRPOTrainer: step throughput ({result['date']})", "",
             f"Command: `{result['command']}`", "",
             f"Machine: {m['cpu']}, {m['cores']} cores; load average {m['loadavg_start'][0]:.2f} at start, "
             f"{m['loadavg_end'][0]:.2f} at end. torch {m['torch']}, transformers {m['transformers']}, "
             f"trl {m['trl']}, deepspeed {m['deepspeed']}. bf16 matmul instructions: "
             f"{m.get('bf16_isa') or 'none (AVX2 only: bf16 is emulated, slower than fp32)'}; credo's --dtype auto "
             f"here: {m.get('auto_dtype', '?')}.", "",
             "Settings: " + ", ".join(f"{k} {v}" for k, v in result["settings"].items()), "",
             f"| runner | s/step | generated tokens/step | generated tokens/s | {trl_best or 'TRL'} s/step / runner "
             "s/step |",
             "|---|---|---|---|---|"]
    for name, run in runs.items():
        s = run["summary"]
        ratio = f"{trl['s_per_step'] / s['s_per_step']:.2f}" if trl else "n/a"
        lines.append(f"| {name} | {s['s_per_step']:.2f} | {s['tokens_per_step']:.0f} | "
                     f"{s['generated_tokens_per_s']:.1f} | {ratio} |")
    credo = [n for n in runs if n not in TRL_RUNNERS]
    best = min(credo, key=lambda n: runs[n]["summary"]["s_per_step"]) if credo else None
    if trl and best:
        ratio = trl["s_per_step"] / runs[best]["summary"]["s_per_step"]
        lines += ["", f"Best credo runner: {best}, {ratio:.2f}x {trl_best}'s step throughput."]
    if trl and "credo-default" in runs:
        ratio = trl["s_per_step"] / runs["credo-default"]["summary"]["s_per_step"]
        lines += ["", f"credo at its default system flags: **{ratio:.2f}x** the step throughput of TRL's faster dtype "
                      f"({trl_best}); target >= 2.0x" + (" (reached)." if ratio >= 2.0 else
                                                           f" (short by {2.0 / ratio:.2f}x).")]
        if len(trl_runs) == 1:
            lines.append(one_trl_dtype_note(trl_best, result.get("limit")))
    if result.get("limit"):
        auto = m.get("auto_dtype", "fp32").split()[0]
        lines += ["", *limit_lines(result["limit"], runs, {n: CREDO_RUNNERS[n][2] or auto for n in credo})]
    lines += ["", "Per-phase seconds per step (mean over measured steps). credo: time/* metrics, the slowest rank's, "
              "except logprobs/backward/optimizer_step (rank 0's, parts of train). TRL: wrappers around "
              "GRPOTrainer methods (rollout = generate + reward + advantages; loss_forward = log-prob forward + loss).",
              ""]
    keys = []
    for run in runs.values():
        keys += [k for k in run["summary"]["phases"] if k not in keys]
    keys = sorted(keys, key=lambda k: PHASES.index(k) if k in PHASES else len(PHASES))
    lines += ["| runner | s/step | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for name, run in runs.items():
        ph = run["summary"]["phases"]
        lines.append(f"| {name} | {run['summary']['s_per_step']:.2f} | "
                     + " | ".join(f"{ph[k]:.2f}" if k in ph else "" for k in keys) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
