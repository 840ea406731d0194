"""The README's main job (`bash scripts/train.sh`) over several seeds: held-out accuracy before and after, with its
standard error over seeds (issue #20 item 4).

    python benchmarks/main_job_seeds.py --seeds 1,2,3            # runs what is missing, then reports
    python benchmarks/main_job_seeds.py --seeds 1,2,3 --report    # runs nothing

Each seed runs `SEED=s OUTPUT=output/main_job/seed_s bash scripts/train.sh` unchanged (the user's command, every
other setting at its default). A seed is done once its eval_final/results.json exists, so an interrupted sweep
continues with the next missing seed (an interrupted seed starts over: scripts/train.sh with RESUME=none).
The slim record of each seed (metrics.jsonl and both evals' metrics) is copied to benchmarks/results/archive/main_job/,
which git keeps packed as main_job.tar.gz (benchmarks/archive_pack.py), from which `--report --runs_dir
benchmarks/results/archive/main_job` reproduces the result.

Deciding quantity, fixed before the runs: the gain in greedy held-out accuracy (final - initial pass@1 on 200 eval
prompts), mean over seeds +- its standard error over seeds; each eval's own binomial standard error is reported too.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.archive_pack import pack, unpacked  # noqa: E402
from benchmarks.paired import paired  # noqa: E402
from benchmarks.results_io import cpu_model, write_results  # noqa: E402

SLIM = ("metrics.jsonl", os.path.join("eval_initial", "results.json"), os.path.join("eval_final", "results.json"))


def run_seed(seed: int, output: str):
    started = time.time()
    if os.path.exists(output):
        shutil.rmtree(output)  # an interrupted seed starts over (RESUME=none), never half-reused
    env = dict(os.environ, SEED=str(seed), OUTPUT=output)
    code = subprocess.run(["bash", "scripts/train.sh"], cwd=REPO, env=env).returncode
    if code != 0:
        sys.exit(f"main_job_seeds: scripts/train.sh failed for seed {seed} (exit {code}); log: {output}/training.log")
    with open(os.path.join(output, "wall_seconds.json"), "w") as f:
        json.dump({"wall_seconds": time.time() - started}, f)


def archive(output: str, target: str):
    """Copy what the report reads, without the model or the per-problem responses."""
    for name in (*SLIM, "wall_seconds.json"):
        src = os.path.join(output, name)
        if not os.path.exists(src):
            continue
        os.makedirs(os.path.dirname(os.path.join(target, name)), exist_ok=True)
        with open(src) as f:
            if name.endswith("results.json"):
                data = {k: v for k, v in json.load(f).items() if k != "problems"}
                with open(os.path.join(target, name), "w") as g:
                    json.dump(data, g, indent=1)
            else:
                shutil.copyfile(src, os.path.join(target, name))


def read_seed(run_dir: str) -> dict:
    def metrics(name):
        with open(os.path.join(run_dir, name, "results.json")) as f:
            data = json.load(f)
        return data["metrics"], data["config"]
    initial, config = metrics("eval_initial")
    final, _ = metrics("eval_final")
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]
    wall = os.path.join(run_dir, "wall_seconds.json")
    return {"initial": initial["pass@1"], "final": final["pass@1"], "gain": final["pass@1"] - initial["pass@1"],
            "eval_n": config["limit"], "steps": len(rows), "seconds_per_step": sum(r["time/step"] for r in rows) / len(rows),
            "wall_seconds": json.load(open(wall))["wall_seconds"] if os.path.exists(wall) else None}


def binomial_se(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


def summarize(seeds, runs_dir: str) -> dict:
    per_seed = {s: read_seed(os.path.join(runs_dir, f"seed_{s}")) for s in seeds}
    gains = [per_seed[s]["gain"] for s in seeds]
    comparison = paired([per_seed[s]["final"] for s in seeds], [per_seed[s]["initial"] for s in seeds])
    return {"name": "main_job", "command": "SEED=s OUTPUT=output/main_job/seed_s bash scripts/train.sh",
            "deciding": "gain in greedy held-out pass@1 (final - initial), mean over seeds +- SE over seeds",
            "seeds": list(seeds), "per_seed": per_seed, "mean_gain": sum(gains) / len(gains),
            "se_gain": comparison["se_diff"], "final_vs_initial": comparison, "cpu": cpu_model(),
            "load_average": os.getloadavg()}


def report(r: dict) -> str:
    lines = [f"# The main job over {len(r['seeds'])} seeds\n",
             f"Command per seed: `{r['command']}` (every other setting at scripts/train.sh's default). CPU: {r['cpu']}; "
             f"load average at report time {r['load_average'][0]:.1f}.\n",
             f"Deciding quantity (fixed before the runs): {r['deciding']}.\n",
             "| seed | initial pass@1 | final pass@1 | gain | steps | s/step | wall min |", "|---|---|---|---|---|---|---|"]
    for s in r["seeds"]:
        p = r["per_seed"][s]
        wall = f"{p['wall_seconds'] / 60:.1f}" if p["wall_seconds"] else "?"
        lines.append(f"| {s} | {p['initial']:.3f} ± {binomial_se(p['initial'], p['eval_n']):.3f} | "
                     f"{p['final']:.3f} ± {binomial_se(p['final'], p['eval_n']):.3f} | {p['gain']:+.3f} | {p['steps']} | "
                     f"{p['seconds_per_step']:.1f} | {wall} |")
    c = r["final_vs_initial"]
    lines += ["", f"Mean gain {r['mean_gain']:+.3f} ± {r['se_gain']:.3f} (SE over {c['n']} seeds), 95% bootstrap CI "
              f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]; final > initial in {c['a_higher']} of {c['n']} seeds. "
              "The ± on each accuracy is its binomial standard error over the eval prompts; the initial model is the "
              "same for every seed (greedy decoding)."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="1,2,3", help="comma list of seeds (default 1,2,3)")
    p.add_argument("--output_root", default=os.path.join(REPO, "output", "main_job"), help="runs go to ROOT/seed_S")
    p.add_argument("--runs_dir", default=os.path.join(REPO, "benchmarks", "results", "archive", "main_job"),
                   help="slim records, committed (default benchmarks/results/archive/main_job)")
    p.add_argument("--report", action="store_true", help="run nothing; report from --runs_dir")
    p.add_argument("--results", default=os.path.join(REPO, "benchmarks", "results", "main_job_seeds"))
    a = p.parse_args(argv)
    seeds = [int(s) for s in a.seeds.split(",")]
    unpacked(a.runs_dir)
    if not a.report:
        for s in seeds:
            output = os.path.join(a.output_root, f"seed_{s}")
            if not os.path.exists(os.path.join(output, "eval_final", "results.json")):
                print(f"main_job_seeds: seed {s}: running ({output})", flush=True)
                run_seed(s, output)
            archive(output, os.path.join(a.runs_dir, f"seed_{s}"))
            pack(a.runs_dir)
    write_results(summarize(seeds, a.runs_dir), a.results, report)


if __name__ == "__main__":
    main()
