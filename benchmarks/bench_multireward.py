"""Learning speed of GRPO (summed reward), GDPO, DARA-Asym and DARA-Sym with correctness + a sparse length reward.

The length reward is `benchmarks.extra_rewards:concise_answer` (at most 4 words before the final answer; abstains when no
number is given, which closes the `\boxed{number}` shortcut the plain `length` reward allowed).

Same model (SmolLM2-135M-Instruct), data, seeds and step budget for every method; each run is `train.py` under
the real `deepspeed` launcher (1 rank, ZeRO-3), then a greedy eval of the exported model on held-out prompts.
Reports the first step at which the length reward's batch mean reaches THRESHOLD and the final correctness.

    .venv/bin/pip install -r requirements-bench.txt
    .venv/bin/python benchmarks/bench_multireward.py --seeds 1,2 --max_steps 12
"""
import argparse
import json
import os
import subprocess
import sys
import time

from rl.log.loggers import read_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LENGTH_KEY = "concise_answer/mean"  # reward/<name>/mean over responses that gave a number (abstentions left out)
METHODS = {
    "grpo (summed)": ["--algo", "grpo"],
    "gdpo": ["--algo", "gdpo"],
    "dara-asym": ["--algo", "dara", "--dara_variant", "asym"],
    "dara-sym": ["--algo", "dara", "--dara_variant", "sym"],
}


def run(cmd, log):
    with open(log, "w") as f:
        subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, check=True,
                       env=dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count())))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--max_steps", type=int, default=12)
    p.add_argument("--threshold", type=float, default=0.8)
    p.add_argument("--eval_samples", type=int, default=100)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--out", default=os.path.join(REPO, "output", "bench_multireward"))
    p.add_argument("--results", default=os.path.join(REPO, "experiments", "results", "multireward"))
    a = p.parse_args()
    deepspeed = os.path.join(os.path.dirname(sys.executable), "deepspeed")
    results = []
    for seed in [int(s) for s in a.seeds.split(",")]:
        for method, flags in METHODS.items():
            out = os.path.join(a.out, f"{method.split()[0]}_seed{seed}")
            os.makedirs(out, exist_ok=True)
            t0 = time.time()
            if not os.path.exists(os.path.join(out, "eval.json")):  # finished runs are reused when re-invoked
                run([deepspeed, "--num_gpus", "1", "--master_port", "29533", "train.py", *flags,
                     "--reward_funcs", "correctness,benchmarks.extra_rewards:concise_answer", "--dtype", a.dtype,
                     "--max_steps", str(a.max_steps), "--seed", str(seed), "--resume", "none", "--output_dir", out],
                    os.path.join(out, "train.log"))
            if not os.path.exists(os.path.join(out, "eval.json")):
                run([sys.executable, "eval.py", "--model_name_or_path", os.path.join(out, "final"), "--dtype", a.dtype,
                     "--limit", str(a.eval_samples), "--batch_size", "100", "--output_dir", out],
                    os.path.join(out, "eval.log"))
                os.rename(os.path.join(out, "results.json"), os.path.join(out, "eval.json"))
            rows = read_metrics(os.path.join(out, "metrics.jsonl"))
            key = next(k for k in rows[0] if k.endswith(LENGTH_KEY))
            length = [r[key] for r in rows]
            reached = next((r["step"] for r in rows if r[key] is not None and r[key] >= a.threshold), None)
            with open(os.path.join(out, "eval.json")) as f:
                result = json.load(f)
            accuracy = 100 * result["metrics"]["pass@1"] if "metrics" in result else result["accuracy"]
            results.append({"method": method, "seed": seed, "steps_to_threshold": reached, "length_curve": length,
                            "correctness_curve": [r["reward/correctness/mean"] for r in rows],
                            "final_greedy_accuracy": accuracy, "minutes": (time.time() - t0) / 60})
            print(f"{method:14s} seed {seed}: length>={a.threshold} at step {reached}, greedy acc {accuracy:.1f}%",
                  flush=True)
    os.makedirs(os.path.dirname(a.results), exist_ok=True)
    with open(a.results + ".json", "w") as f:
        json.dump({"config": vars(a), "runs": results}, f, indent=1)
    write_table(results, a)
    plot(results, a)


def write_table(results, a):
    lines = [f"| method | steps to length mean >= {a.threshold} (per seed) | final greedy accuracy % (per seed) | mean accuracy |",
             "|---|---|---|---|"]
    for method in METHODS:
        runs = [r for r in results if r["method"] == method]
        steps = ", ".join(str(r["steps_to_threshold"]) if r["steps_to_threshold"] else f">{a.max_steps}" for r in runs)
        accs = ", ".join(f"{r['final_greedy_accuracy']:.1f}" for r in runs)
        mean = sum(r["final_greedy_accuracy"] for r in runs) / len(runs)
        lines.append(f"| {method} | {steps} | {accs} | {mean:.1f} |")
    with open(a.results + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def plot(results, a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = dict(zip(METHODS, ["tab:gray", "tab:blue", "tab:red", "tab:orange"]))
    for r in results:
        style = "-" if r["seed"] == results[0]["seed"] else "--"
        label = f"{r['method']} (seed {r['seed']})"
        axes[0].plot(range(1, len(r["length_curve"]) + 1), r["length_curve"], style, color=colors[r["method"]], label=label)
        axes[1].plot(range(1, len(r["correctness_curve"]) + 1), r["correctness_curve"], style, color=colors[r["method"]])
    axes[0].axhline(a.threshold, color="k", lw=0.5)
    axes[0].set(title="concise-answer reward (<= 4 words before the answer), batch mean", xlabel="step")
    axes[1].set(title="correctness, batch mean (sampled)", xlabel="step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.results + ".png", dpi=110)


if __name__ == "__main__":
    main()
