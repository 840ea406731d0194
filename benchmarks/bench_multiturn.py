"""TCPO against MT-GRPO and trajectory GRPO on multi-turn (verify-and-refine) arithmetic.

Same model (SmolLM2-135M-Instruct), data, seeds, step budget and `--max_turns` for every method; each run is
`train.py` under the real `deepspeed` launcher (1 rank, ZeRO-3), then `eval.py` on held-out prompts with the same
number of turns: n samples per prompt at the rollout temperature, best-turn pass@k, pass@k of the final turn,
success by turn and average turns to success. The untrained model is evaluated once with the same settings.

    .venv/bin/pip install -r requirements-bench.txt
    .venv/bin/python benchmarks/bench_multiturn.py --seeds 1,2 --max_steps 12
"""
import argparse
import json
import os
import subprocess
import sys
import time

from rl.eval.evaluation import aggregate
from rl.log.loggers import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

METHODS = {
    "grpo (trajectory)": ["--algo", "grpo", "--traj_score", "final"],
    "mt_grpo": ["--algo", "mt_grpo"],
    "tcpo": ["--algo", "tcpo"],
}
COLORS = {"base model": "k", "grpo (trajectory)": "tab:gray", "mt_grpo": "tab:blue", "tcpo": "tab:red"}


def run(cmd, log):
    with open(log, "w") as f:
        subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, check=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count())))


def evaluate(model, out, a):
    """eval.py on held-out arith with the benchmark's multi-turn settings; cached in OUT/eval.json."""
    path = os.path.join(out, "eval.json")
    if os.path.exists(path):  # a cached eval of at least as many prompts: its first eval_prompts problems
        with open(path) as f:
            cached = json.load(f)
        if len(cached["problems"]) > a.eval_prompts:
            ks = [int(k) for k in a.eval_k.split(",")]
            return aggregate(cached["problems"][:a.eval_prompts], ks, a.max_turns)
    if not os.path.exists(path):
        os.makedirs(out, exist_ok=True)
        run([sys.executable, "eval.py", "--model_name_or_path", model, "--env", "arith", "--dtype", a.dtype,
             "--limit", str(a.eval_prompts), "--n", str(a.eval_n), "--k", a.eval_k, "--max_turns", str(a.max_turns),
             "--temperature", str(a.temperature), "--seed", "0", "--batch_size", "200", "--output_dir", out],
            os.path.join(out, "eval.log"))
        os.rename(os.path.join(out, "results.json"), path)
    with open(path) as f:
        return json.load(f)["metrics"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--max_steps", type=int, default=12)
    p.add_argument("--max_turns", type=int, default=3)
    p.add_argument("--temperature", type=float, default=0.7, help="rollout and eval sampling temperature")
    p.add_argument("--eval_prompts", type=int, default=100)
    p.add_argument("--eval_n", type=int, default=4)
    p.add_argument("--eval_k", default="1,2,4")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--out", default=os.path.join(REPO, "output", "bench_multiturn"))
    p.add_argument("--results", default=os.path.join(REPO, "experiments", "results", "multiturn"))
    a = p.parse_args()
    deepspeed = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    base = evaluate(os.path.join(REPO, ".cache", "models", "SmolLM2-135M-Instruct"), os.path.join(a.out, "base"), a)
    results = [{"method": "base model", "seed": None, "eval": base}]
    for seed in [int(s) for s in a.seeds.split(",")]:
        for method, flags in METHODS.items():
            out = os.path.join(a.out, f"{method.split()[0]}_seed{seed}")
            os.makedirs(out, exist_ok=True)
            t0 = time.time()
            if not os.path.exists(os.path.join(out, "final", "config.json")):  # finished runs are reused
                run([deepspeed, "--num_gpus", "1", "--master_port", "29534", "train.py", *flags, "--env", "arith",
                     "--max_turns", str(a.max_turns), "--temperature", str(a.temperature), "--dtype", a.dtype,
                     "--max_steps", str(a.max_steps), "--seed", str(seed), "--resume", "none", "--output_dir", out,
                     # 4 micro-batches of 8: three turns make long sequences, and the full-vocabulary log-prob
                     # activations of 32 at once peaked near 11 GB (one run was OOM-killed on a 24 GB machine)
                     "--per_device_train_micro_batch_size", "8"],
                    os.path.join(out, "train.log"))
            metrics = evaluate(os.path.join(out, "final"), out, a)
            rows = read_metrics(os.path.join(out, "metrics.jsonl"))
            results.append({
                "method": method, "seed": seed, "eval": metrics,
                "success_curve": [r[f"success_by_turn/{a.max_turns}"] for r in rows],
                "first_turn_curve": [r["success_by_turn/1"] for r in rows],
                "step_seconds": sum(r["time/step"] for r in rows) / len(rows),
                "cf_time_share": sum(r.get("time/counterfactual", 0.0) / r["time/step"] for r in rows) / len(rows),
                "minutes": (time.time() - t0) / 60})
            print(f"{method:18s} seed {seed}: best_turn_pass@1 {metrics['best_turn_pass@1']:.3f} "
                  f"avg turns {metrics['avg_turns_to_success']:.2f}", flush=True)
    os.makedirs(os.path.dirname(a.results), exist_ok=True)
    with open(a.results + ".json", "w") as f:
        json.dump({"config": vars(a), "runs": results}, f, indent=1)
    write_table(results, a)
    plot(results, a)


def write_table(results, a):
    ks = [int(k) for k in a.eval_k.split(",")]
    cols = [f"best_turn_pass@{k}" for k in ks] + ["pass@1", "success_by_turn/1", "avg_turns_to_success"]
    lines = [f"Held-out arith, {a.eval_prompts} prompts x n={a.eval_n} samples at T={a.temperature}, "
             f"{a.max_turns} turns; {a.max_steps} training steps per run. Cells: mean over seeds (per seed).", "",
             "| method | " + " | ".join(cols) + " | s/step |", "|---|" + "---|" * (len(cols) + 1)]
    for method in ["base model", *METHODS]:
        runs = [r for r in results if r["method"] == method]
        cells = []
        for c in cols:
            vals = [r["eval"][c] for r in runs]
            mean = sum(vals) / len(vals)
            cells.append(f"{mean:.3f}" + (" (" + ", ".join(f"{v:.3f}" for v in vals) + ")" if len(vals) > 1 else ""))
        secs = [r["step_seconds"] for r in runs if "step_seconds" in r]
        cells.append(f"{sum(secs) / len(secs):.1f}" if secs else "")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    with open(a.results + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def plot(results, a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    seeds = sorted({r["seed"] for r in results if r["seed"] is not None})
    for r in results:
        if r["seed"] is None:
            continue
        style = "-" if r["seed"] == seeds[0] else "--"
        axes[0].plot(range(1, len(r["success_curve"]) + 1), r["success_curve"], style, color=COLORS[r["method"]],
                     label=f"{r['method']} (seed {r['seed']})")
    axes[0].set(title=f"training rollouts: solved within {a.max_turns} turns", xlabel="step")
    axes[0].legend(fontsize=7)
    turns = range(1, a.max_turns + 1)
    for method in ["base model", *METHODS]:
        runs = [r for r in results if r["method"] == method]
        curve = [sum(r["eval"][f"success_by_turn/{t}"] for r in runs) / len(runs) for t in turns]
        axes[1].plot(list(turns), curve, marker="o", color=COLORS[method], label=method)
    axes[1].set(title="held-out: solved by turn (mean over seeds)", xlabel="turn", xticks=list(turns))
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.results + ".png", dpi=110)


if __name__ == "__main__":
    main()
