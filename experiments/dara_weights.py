"""Which reward DARA up-weighted in a sweep: per DARA run, for each reward, the steps where its weight w was above 1,
its mean and largest w, the steps where the cap bound, and the steps where it was active in any group.

    python experiments/dara_weights.py experiments/results/archive/dara_toolcall_think \
        --output experiments/results/dara_toolcall_think.weights.md

Reads a compare.py cache or archive (experiments/sweep_curves.py's load_runs) and the `dara/*` keys DARA logs every
step (rl/advantages/dara.py: w, cap_binds, active_groups per reward). Runs of other methods log none and are skipped.
Prints a Markdown report (one table row per run and reward), the diagnostics DARA's pre-registrations list as
secondary; --output also writes it (density_check.py's convention).
"""
import argparse

from benchmarks.results_io import print_and_write
from experiments.sweep_curves import load_runs


def rewards_of(rows: list) -> list:
    """The reward names DARA logged a weight for, in their logged order."""
    return [key[len("dara/w/"):] for key in rows[0] if key.startswith("dara/w/")] if rows else []


def weight_summary(rows: list, reward: str) -> dict:
    """One DARA run's weights for one reward over its steps (rows: metrics.jsonl rows)."""
    weights = [row[f"dara/w/{reward}"] for row in rows]
    return {"steps": len(rows),
            "up_weighted": sum(w > 1 for w in weights),
            "mean_w": sum(weights) / len(weights),
            "max_w": max(weights),
            "cap_binds": sum(row.get(f"dara/cap_binds/{reward}", 0) > 0 for row in rows),
            "active": sum(row.get(f"dara/active_groups/{reward}", 0) > 0 for row in rows)}


def report(runs_dir: str, runs: list) -> str:
    """A title naming the command, then the table."""
    lines = ["# Which reward each DARA run up-weighted", "", f"`python experiments/dara_weights.py {runs_dir}`", "",
             "| method | seed | reward | steps w > 1 | mean w | max w | steps the cap bound | steps active |",
             "|---|---|---|---|---|---|---|---|"]
    for method, seed, rows in runs:
        for reward in rewards_of(rows):
            s = weight_summary(rows, reward)
            lines.append(f"| {method} | {seed} | {reward} | {s['up_weighted']} of {s['steps']} | {s['mean_w']:.3f} | "
                         f"{s['max_w']:.2f} | {s['cap_binds']} | {s['active']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs_dir", help="a compare.py cache or archive folder (one folder per run, each with run.json)")
    p.add_argument("--output", help="also write the report here")
    a = p.parse_args(argv)
    runs = [r for r in load_runs(a.runs_dir) if rewards_of(r[2])]
    if not runs:
        raise SystemExit(f"{a.runs_dir}: no finished run logs dara/w/* (no DARA run there)")
    print_and_write(report(a.runs_dir, runs), a.output)


if __name__ == "__main__":
    main()
