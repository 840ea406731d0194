"""The cost per step of each update option (docs/loss.md) on the main job's recipe, as ratios to the plain update
measured in the same invocation.

Every run is `train.py` under the real `deepspeed` launcher with scripts/train.sh's recipe (GRPO, --env arith,
SmolLM2-135M-Instruct, 8 prompts x 4 responses, <= 32 new tokens, lr 2e-5, --beta 0, seed 1234, 1 rank, --dtype auto)
and one option more; the first step (warm-up) is left out of the means. The plain run goes first and again last, so a
drift in the shared machine's load shows. Options that need vLLM (--vllm_is_correction) cannot run on the HF sampler
and are not timed: their cost is an elementwise exp / clamp per token.

The decode loop now records every drawn token's log-prob (the sampler-trainer gap check) in all runs; its cost is
measured apart, in this process: the decode loop on the same model and batch with and without recording.

    nice -n 10 .venv/bin/python benchmarks/bench_update_options.py --steps 3
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

from benchmarks.ports import free_port
from benchmarks.results_io import cpu_model, write_results
from rl.engine.hardware import cpu_bf16_matmul_isa
from rl.log.loggers import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct")
RECIPE = ["--algo", "grpo", "--env", "arith", "--per_device_generation_batch_size", "8", "--num_generations", "4",
          "--max_answer_seq_len", "32", "--temperature", "0.7", "--actor_learning_rate", "2e-5", "--beta", "0",
          "--seed", "1234"]
OPTIONS = {  # name -> (flags, what it is)
    "plain": ([], "--loss_mode vanilla, every token, no reference"),
    "gspo": (["--loss_mode", "gspo"], "GSPO's sequence ratio"),
    "cispo": (["--loss_mode", "cispo"], "CISPO's clipped stop-gradient weight"),
    "sapo": (["--loss_mode", "sapo"], "SAPO's soft gate"),
    "top_entropy_0.2": (["--top_entropy_quantile", "0.2"], "the top 20% entropy tokens carry the gradient"),
    "beta_0.04": (["--beta", "0.04"], "KL to a frozen reference (one more forward)"),
    "beta_0.04_sync_every_step": (["--beta", "0.04", "--sync_ref_model", "--ref_model_sync_steps", "1"],
                                  "the same, the reference mixed toward the policy after every step"),
    "mini_batches_4": (["--ppo_mini_batch_size", "2"], "4 optimizer steps per rollout (old log-probs forward)"),
    "ppo_epochs_2": (["--ppo_epochs", "2"], "2 passes, 2 optimizer steps (old log-probs forward)"),
    # the same step in other shapes: the gradient does not depend on the micro-batch (tests/update/test_update.py)
    "micro_16": (["--per_device_train_micro_batch_size", "16"], "2 micro-batches of 16 rows (default: 4 of 8)"),
    "micro_32": (["--per_device_train_micro_batch_size", "32"], "1 micro-batch of 32 rows"),
    "plain_again": ([], "the plain run again: the load's drift"),
}


def mean(values):
    values = list(values)
    return sum(values) / len(values)


def train(out, flags, a):
    deepspeed = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    with open(os.path.join(out, "train.log"), "w") as log:
        subprocess.run([deepspeed, "--num_gpus", "1", "--master_port", str(free_port()), "train.py", *RECIPE, *flags,
                        "--model_name_or_path", a.model, "--dtype", a.dtype, "--max_steps", str(a.steps),
                        "--resume", "none", "--save_strategy", "no", "--output_dir", out],
                       cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count())))


def run(name, flags, a):
    out = os.path.join(a.out, name)
    os.makedirs(out, exist_ok=True)
    started = os.getloadavg()[0]
    for attempt in range(1, a.attempts + 1):  # on a shared machine a run can be OOM-killed by others' memory
        try:
            train(out, flags, a)
            break
        except subprocess.CalledProcessError:
            if attempt == a.attempts:
                raise
            print(f"{name}: attempt {attempt} failed (see {out}/train.log); again in 60 s", flush=True)
            time.sleep(60)
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    timed = rows[1:] or rows
    return {"flags": flags, "steps": len(rows), "load_before": started,
            "step_seconds": mean(r["time/step"] for r in timed),
            "generate_seconds": mean(r["time/generate"] for r in timed),
            "train_seconds": mean(r["time/train"] for r in timed),
            "mfu": mean(r.get("perf/mfu/actor", float("nan")) for r in timed),
            "logp_diff_max": max(r.get("rollout/logp_diff_max", float("nan")) for r in rows)}


def decode_cost(a) -> dict:
    """Seconds of credo's decode loop on 32 main-job prompts x 32 tokens, without and with each recorded signal."""
    from transformers import AutoModelForCausalLM

    from envs.arith import ArithEnv
    from rl.engine.models import load_tokenizer
    from rl.rollout.decode import sample_batch_with_signals

    torch.set_num_threads(os.cpu_count())
    tok = load_tokenizer(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    rows = ArithEnv.dataset("train", 8, seed=a.seed)
    texts = [tok.apply_chat_template(ArithEnv().reset(row), tokenize=False, add_generation_prompt=True)
             for row in rows for _ in range(4)]
    tok.padding_side = "left"
    enc = tok(texts, return_tensors="pt", padding=True)
    out = {}
    for name, signals in (("none", frozenset()), ("logp", frozenset({"logp"})),
                          ("logp+entropy", frozenset({"logp", "entropy"}))):
        times = []
        for _ in range(a.decode_repeats):
            torch.manual_seed(a.seed)
            t0 = time.perf_counter()
            with torch.no_grad():
                sample_batch_with_signals(model, enc.input_ids, enc.attention_mask, 32, [tok.eos_token_id], 0.7,
                                          signals=signals)
            times.append(time.perf_counter() - t0)
        out[name] = sorted(times)[len(times) // 2]
    return out


def report(r) -> str:
    runs, base = r["runs"], r["base"]
    lines = [
        f"Update options' cost per step, `{r['command']}` ({r['machine']['cpu']}, {r['machine']['cores']} cores, bf16 "
        f"matmul: {r['machine']['bf16_isa'] or 'none'}; --dtype {r['config']['dtype']}; `uptime` before: "
        f"{r['uptime'][0]}; after: {r['uptime'][1]}; a machine shared with other jobs). The main job's recipe "
        f"(scripts/train.sh: GRPO, --env arith, SmolLM2-135M-Instruct, 8 prompts x 4 responses, <= 32 new tokens), "
        f"{r['config']['steps']} steps per run, means over steps 2..{r['config']['steps']}. Ratios are to the mean of "
        f"the two plain runs ({base['step_seconds']:.1f} s/step, train {base['train_seconds']:.1f} s).", "",
        "| option | flags | s/step | train s/step | step / plain | train / plain | update MFU | max sampler gap "
        "| load at start |",
        "|---|---|---|---|---|---|---|---|---|"]
    for name, (flags, what) in OPTIONS.items():
        if name not in runs:  # --only
            continue
        x = runs[name]
        lines.append(f"| {name}: {what} | `{' '.join(flags) or '-'}` | {x['step_seconds']:.1f} | "
                     f"{x['train_seconds']:.1f} | {x['step_seconds'] / base['step_seconds']:.2f} | "
                     f"{x['train_seconds'] / base['train_seconds']:.2f} | {x.get('mfu', float('nan')):.1%} | "
                     f"{x['logp_diff_max']:.1e} | {x['load_before']:.1f} |")
    d = r["decode"]
    if not d:  # --decode_repeats 0
        return "\n".join(lines) + "\n"
    lines += ["", f"Decode loop alone (32 prompts x 32 tokens, fp32, median of {r['config']['decode_repeats']}): "
              f"{d['none']:.2f} s without recording, {d['logp']:.2f} s recording each token's log-prob "
              f"({d['logp'] / d['none']:.2f}x; every run above pays it: the gap check), {d['logp+entropy']:.2f} s with "
              f"the entropy too ({d['logp+entropy'] / d['none']:.2f}x; --top_entropy_quantile reads it instead of a "
              "forward).", ""]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--model", default=MODEL)
    p.add_argument("--decode_repeats", type=int, default=3, help="0: skip the decode loop's own cost")
    p.add_argument("--attempts", type=int, default=3, help="tries per run (a shared machine's OOM killer)")
    p.add_argument("--only", default=None, help="comma list of OPTIONS to run (default: all)")
    p.add_argument("--out", default=os.path.join(REPO, "output", "bench_update_options"))
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "update_options"))
    a = p.parse_args()
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    names = a.only.split(",") if a.only else list(OPTIONS)
    runs = {}
    for name in names:  # each finished run is kept at once: a long benchmark stopped early still tells something
        runs[name] = run(name, OPTIONS[name][0], a)
        os.makedirs(os.path.dirname(a.results), exist_ok=True)
        with open(a.results + ".partial.json", "w") as f:
            json.dump({"runs": runs, "uptime_before": uptime_before, "config": vars(a)}, f, indent=1)
    decode = decode_cost(a) if a.decode_repeats > 0 else {}
    plain = [runs[n] for n in ("plain", "plain_again") if n in runs]
    base = {k: mean(x[k] for x in plain) for k in ("step_seconds", "train_seconds")}
    result = {"runs": runs, "base": base, "decode": decode, "config": vars(a),
              "uptime": [uptime_before, subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()],
              "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "bf16_isa": cpu_bf16_matmul_isa()},
              "command": "python benchmarks/bench_update_options.py " + " ".join(sys.argv[1:])}
    write_results(result, a.results, report)


if __name__ == "__main__":
    main()
