"""The main job side by side (issue #64 item 4): `bash scripts/train.sh` with the flags of arm A (by default none: the
job as it is) and of arm B (by default --cpu_packed_weights), seed by seed in one invocation on one machine, the
order alternating from seed to seed.

    python benchmarks/main_job_ab.py --seeds 1,2,3 [--a_args ""] [--b_args "--cpu_packed_weights"] [--name main_job_ab]
    python benchmarks/main_job_ab.py --a_checkout ../ws_old --b_args "" --name NAME    # two worktrees: old vs this one
    python benchmarks/main_job_ab.py --seeds 1,2,3 --report [--name ...]               # runs nothing

Deciding quantities, fixed before the runs:
  1. seconds per step: each run's mean time/step over its steps after the first (the first warms up), B / A per seed,
     mean over seeds +- its standard error; the issue's target is B at least 15% lower (a ratio <= 0.85);
  2. the gain in greedy held-out pass@1 (final - initial, scripts/train.sh's evals), B - A per seed, mean +- SE: the
     same gain means a difference within its standard error of 0.
With --a_checkout (or --b_checkout) an arm runs another checkout's scripts/train.sh (a `git worktree` at an older
commit, with its own .venv from its own scripts/setup.sh): the issue's "today's commit and the new one", each its own
code. The result names each arm's commit.
Runs go to output/NAME/{a,b}/seed_S (a seed is done once its eval_final/results.json exists; an interrupted
one starts over); the slim records (benchmarks/main_job_seeds.py's) to benchmarks/results/archive/NAME/, from which
--report reproduces the result (benchmarks/results/NAME.md). Run it alone on the machine: the two arms must see the same load.
"""
import argparse
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [REPO]:
    sys.path.insert(0, REPO)

from benchmarks.archive_pack import pack, unpacked  # noqa: E402
from benchmarks import run_child  # noqa: E402
from benchmarks.main_job_seeds import archive, read_seed  # noqa: E402
from benchmarks.paired import mean_se, paired  # noqa: E402
from benchmarks.results_io import cpu_model, write_results  # noqa: E402

ARMS = ("a", "b")


def run(seed: int, output: str, extra: list, checkout: str = REPO):
    started = time.time()
    shutil.rmtree(output, ignore_errors=True)  # an interrupted run starts over, never half-reused
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}  # the checkout's own .venv
    try:  # a SIGTERM to this script stops the arm's run too, instead of leaving it training unseen (run_child.py)
        code = run_child.call(["bash", "scripts/train.sh", *extra], checkout, None, f"seed {seed}'s run",
                              env=dict(env, SEED=str(seed), OUTPUT=output))
    except run_child.Interrupted as stop:
        sys.exit(f"main_job_ab: {checkout}/scripts/train.sh: {stop}; that seed starts over when rerun")
    if code != 0:
        sys.exit(f"main_job_ab: {checkout}/scripts/train.sh {' '.join(extra)} failed for seed {seed} (exit {code}); log: "
                 f"{output}/training.log")
    with open(os.path.join(output, "wall_seconds.json"), "w") as f:
        json.dump({"wall_seconds": time.time() - started}, f)
    # the two DeepSpeed checkpoints are 1.6-1.8 GB each and the comparison reads neither: six runs filled this VM's
    # disk (a run's save then stops it, ENOSPC); final/ and the logs stay
    shutil.rmtree(os.path.join(output, "checkpoints"), ignore_errors=True)


def steady_mean(run_dir: str, key: str = "time/step") -> float:
    """The mean of a step metric over the steps after the first (the first warms up); NaN where no step logged it
    (perf/mfu/actor before it existed)."""
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl")) if line.strip()]
    later = [r[key] for r in rows if r["step"] > 1 and r.get(key) is not None]
    return sum(later) / len(later) if later else float("nan")


STEADY = {"steady_seconds_per_step": "time/step", "steady_generate_s": "time/generate", "steady_train_s": "time/train",
          "steady_mfu": "perf/mfu/actor"}


def commit_of(checkout: str) -> str:
    """The checkout's commit (with "+changes" where its tracked files differ from it)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=checkout,
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + ("+changes" if dirty else "") if head.returncode == 0 else "unknown"


def summarize(seeds, runs_dir: str, b_args: str, a_args: str = "", commits: dict = None) -> dict:
    arms = {arm: {s: read_seed(os.path.join(runs_dir, arm, f"seed_{s}")) for s in seeds} for arm in ARMS}
    for arm in ARMS:
        for s in seeds:
            arms[arm][s].update({name: steady_mean(os.path.join(runs_dir, arm, f"seed_{s}"), key)
                                 for name, key in STEADY.items()})
    ratios = [arms["b"][s]["steady_seconds_per_step"] / arms["a"][s]["steady_seconds_per_step"] for s in seeds]
    gains = paired([arms["b"][s]["gain"] for s in seeds], [arms["a"][s]["gain"] for s in seeds])
    return {"a_args": a_args, "b_args": b_args, "commits": commits or {}, "seeds": list(seeds), "arms": arms, "ratio": mean_se(ratios), "ratios": ratios,
            "gain_diff": gains, "cpu": cpu_model(), "load_average": os.getloadavg()}


def report(r: dict) -> str:
    ratio, se = r["ratio"]
    g = r["gain_diff"]
    lines = ["# The main job side by side (issue #64 item 4)", "",
             f"A: `SEED=s bash scripts/train.sh{(' ' + r['a_args']) if r.get('a_args') else ''}`; B: "
             f"`SEED=s bash scripts/train.sh {r['b_args']}`; one invocation, the order alternating by seed. CPU: {r['cpu']}; load average at report time {r['load_average'][0]:.1f}."
             + ("".join(f" Arm {arm.upper()} ran commit {c}." for arm, c in sorted(r["commits"].items()))
                if r.get("commits") else ""), "",
             "| seed | A s/step | B s/step | B / A | A gain | B gain |", "|---|---|---|---|---|---|"]
    for s in r["seeds"]:
        a, b = r["arms"]["a"][s], r["arms"]["b"][s]
        lines.append(f"| {s} | {a['steady_seconds_per_step']:.2f} | {b['steady_seconds_per_step']:.2f} | "
                     f"{b['steady_seconds_per_step'] / a['steady_seconds_per_step']:.3f} | {a['gain']:+.3f} | "
                     f"{b['gain']:+.3f} |")
    lines += ["", f"Seconds per step (after the first), B / A: **{ratio:.3f} ± {se:.3f}** (mean ± SE over "
              f"{len(r['seeds'])} seeds; the target is <= 0.85). Gain B - A: **{g['mean_diff']:+.3f} ± {g['se_diff']:.3f}**"
              f" (paired over seeds; the same gain means within its standard error of 0).", "",
              "Where a step goes (means over seeds of the steps after the first; perf/mfu/actor: the update's "
              "forward + backward FLOPs over its seconds and the kept matmul probe's peak, rl/log/step_metrics.py):", "",
              "| arm | s/step | generate s | train s | update MFU |", "|---|---|---|---|---|"]
    for arm in ("a", "b"):
        mean = {k: sum(r["arms"][arm][s][k] for s in r["seeds"]) / len(r["seeds"]) for k in STEADY}
        mfu = "not logged" if math.isnan(mean["steady_mfu"]) else f"{mean['steady_mfu']:.1%}"  # older commits
        lines.append(f"| {arm.upper()} | {mean['steady_seconds_per_step']:.2f} | {mean['steady_generate_s']:.2f} | "
                     f"{mean['steady_train_s']:.2f} | {mfu} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--a_args", default="", help="train.py flags arm A adds (default none: the job as it is)")
    p.add_argument("--b_args", default="--cpu_packed_weights", help="train.py flags arm B adds")
    p.add_argument("--a_checkout", default=REPO,
                   help="the checkout whose scripts/train.sh arm A runs (default this one): a worktree at an older "
                        "commit, set up with its own scripts/setup.sh")
    p.add_argument("--b_checkout", default=REPO, help="the checkout arm B runs (default this one)")
    p.add_argument("--name", default="main_job_ab",
                   help="names the comparison's folders: output/NAME, benchmarks/results/archive/NAME and "
                        "benchmarks/results/NAME.{json,md} (each overridable below)")
    p.add_argument("--output_root", default=None)
    p.add_argument("--runs_dir", default=None)
    p.add_argument("--report", action="store_true", help="run nothing; report from --runs_dir")
    p.add_argument("--results", default=None)
    a = p.parse_args(argv)
    a.output_root = a.output_root or os.path.join(REPO, "output", a.name)
    a.runs_dir = a.runs_dir or os.path.join(REPO, "benchmarks", "results", "archive", a.name)
    a.results = a.results or os.path.join(REPO, "benchmarks", "results", a.name)
    seeds = [int(s) for s in a.seeds.split(",")]
    unpacked(a.runs_dir)
    checkouts = {"a": os.path.abspath(a.a_checkout), "b": os.path.abspath(a.b_checkout)}
    for arm, checkout in checkouts.items():
        if not os.path.isfile(os.path.join(checkout, "scripts", "train.sh")):
            p.error(f"--{arm}_checkout {checkout}: no scripts/train.sh there")
    commits = None
    if not a.report:
        commits = {arm: commit_of(checkout) for arm, checkout in checkouts.items()}
        for i, s in enumerate(seeds):
            for arm in (ARMS if i % 2 == 0 else ARMS[::-1]):
                output = os.path.join(a.output_root, arm, f"seed_{s}")
                if not os.path.exists(os.path.join(output, "eval_final", "results.json")):
                    print(f"main_job_ab: arm {arm} seed {s}: running ({output})", flush=True)
                    run(s, output, shlex.split(a.b_args if arm == "b" else a.a_args), checkouts[arm])
                archive(output, os.path.join(a.runs_dir, arm, f"seed_{s}"))
            pack(a.runs_dir)
    if commits is None and os.path.exists(a.results + ".json"):  # --report keeps the commits the runs recorded
        with open(a.results + ".json") as f:
            commits = json.load(f).get("commits")
    write_results(summarize(seeds, a.runs_dir, a.b_args, a.a_args, commits), a.results, report)


if __name__ == "__main__":
    main()
