"""Behaviour unchanged, shown (issue #63 item 5): the main job's first steps at two commits give the same metrics.

    python experiments/same_steps.py BEFORE AFTER [--steps 3] [--output experiments/results/same_steps.md]

Each commit is checked out as a detached worktree in a temporary folder (sharing this checkout's .venv and .cache) and
runs train.py with scripts/train.sh's flags (GRPO on arith, the CPU model, seed 1234) for --steps steps in fp32 with
one thread, which is bit-reproducible on one machine. Then every logged metric except the clocks (time/*,
time_share/*, throughput/*, perf/*) is compared step by step: the report says "same" or names the first metric that differs
and by how much. A refactor that changes no behaviour must give "same"; a commit that changes numbers shows where.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from rl.log.step_metrics import CLOCK_METRICS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = ".cache/models/SmolLM2-135M-Instruct"
CLOCKS = CLOCK_METRICS  # timings, throughput and MFU: never the same twice
MAIN_JOB = ["--algo", "grpo", "--env", "arith", "--model_name_or_path", MODEL, "--dtype", "fp32",
            "--per_device_generation_batch_size", "8", "--num_generations", "4", "--max_answer_seq_len", "32",
            "--temperature", "0.7", "--actor_learning_rate", "2e-5", "--beta", "0", "--seed", "1234",
            "--resume", "none", "--save_strategy", "no"]


def run_steps(commit: str, steps: int, scratch: str) -> list:
    """The metrics rows of `steps` main-job steps trained by `commit`'s code."""
    tree = os.path.join(scratch, commit[:12])
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", tree, commit], check=True,
                   capture_output=True)
    try:
        for shared in (".venv", ".cache"):
            os.symlink(os.path.join(REPO, shared), os.path.join(tree, shared))
        out = os.path.join(tree, "output", "same_steps")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": tree}
        proc = subprocess.run([os.path.join(REPO, ".venv", "bin", "python"), "train.py", *MAIN_JOB,
                               "--max_steps", str(steps), "--output_dir", out], cwd=tree, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"same_steps.py: {commit} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            return [json.loads(line) for line in f if line.strip()]
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)


def first_difference(before: list, after: list):
    """None when every non-clock metric of every step is equal (NaN equals NaN), else a sentence naming the first."""
    if len(before) != len(after):
        return f"{len(before)} logged steps before, {len(after)} after"
    for old, new in zip(before, after):
        keys = sorted(k for k in set(old) | set(new) if not k.startswith(CLOCKS))
        for key in keys:
            a, b = old.get(key), new.get(key)
            both_nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
            if a != b and not both_nan:
                return f"step {old.get('step')}: {key} {a} -> {b}"
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--output", default=None, help="append the result to this markdown file")
    a = p.parse_args(argv)
    commits = []
    for given in (a.before, a.after):
        proc = subprocess.run(["git", "-C", REPO, "rev-parse", "--verify", given + "^{commit}"], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise SystemExit(f"same_steps.py: {given!r} is not a commit of {REPO}")
        commits.append(proc.stdout.strip())
    with tempfile.TemporaryDirectory(prefix="same_steps_") as scratch:
        before, after = (run_steps(c, a.steps, scratch) for c in commits)
    compared = sorted({k for row in before for k in row if not k.startswith(CLOCKS)} - {"step"})
    diff = first_difference(before, after)
    line = (f"- {commits[0][:10]} -> {commits[1][:10]}: {a.steps} steps, {len(compared)} metrics each (clocks aside): "
            + ("**same**" if diff is None else f"**differs**, first at {diff}"))
    print(line)
    if a.output:
        new_file = not os.path.exists(a.output)
        with open(a.output, "a") as f:
            if new_file:
                f.write("# Behaviour unchanged, shown (issue #63 item 5)\n\n`python experiments/same_steps.py BEFORE "
                        "AFTER --output experiments/results/same_steps.md`: the main job (scripts/train.sh's flags, "
                        "fp32, one thread) for the first steps at both commits; every metric but the clocks must "
                        "match.\n\n")
            f.write(line + "\n")
    return 0 if diff is None else 1


if __name__ == "__main__":
    sys.exit(main())
