"""Which reward DARA and DVAO up-weighted in a sweep, and what GD²PO-Hard dropped (issue #61 item 4's logs).

Per DARA run, for each reward: the steps where its weight w was above 1, its mean and largest w, the steps where the
cap bound, and the steps where it was active in any group; and per run the realised share of steps in which any
weight moved off 1 (the pre-registrations' check that the mechanism acted). Per DVAO run, for each reward: its mean
share of the groups' spread lambda (dvao/w/<reward>, summing to 1 over the rewards) and the steps where it took the
larger share (above 1/K). Per GD²PO-Hard run: the mean share of responses dropped for conflicting signs, the steps
with any drop, and the mean query weight.

    python experiments/dara_weights.py experiments/results/archive/dara_toolcall_think \
        --output experiments/results/dara_toolcall_think.weights.md

Reads a compare.py cache or archive (experiments/sweep_curves.py's load_runs) and the keys each method logs every
step: `dara/*` (rl/advantages/dara.py: w, cap_binds, active_groups per reward), `dvao/*` (rl/methods/dvao.py),
`gd2po/*` (rl/methods/gd2po_hard.py). Runs of other methods log none and are skipped.
Prints a Markdown report (one table row per run and reward), the diagnostics DARA's pre-registrations list as
secondary; --output also writes it (density_check.py's convention).
"""
import argparse

from benchmarks.results_io import print_and_write
from experiments.sweep_curves import load_runs


def rewards_of(rows: list, prefix: str = "dara") -> list:
    """The reward names DARA (or DVAO, prefix "dvao") logged a weight for, in their logged order."""
    return [key[len(f"{prefix}/w/"):] for key in rows[0] if key.startswith(f"{prefix}/w/")] if rows else []


def moved_steps(rows: list) -> int:
    """The steps of a DARA run in which some reward's weight was not 1 (the mechanism acted on the advantages)."""
    return sum(any(abs(row[f"dara/w/{r}"] - 1.0) > 1e-9 for r in rewards_of(rows)) for row in rows)


def dvao_summary(rows: list, reward: str) -> dict:
    """One DVAO run's spread share lambda for one reward over its steps."""
    shares = [row[f"dvao/w/{reward}"] for row in rows]
    k = len(rewards_of(rows, "dvao"))
    return {"steps": len(rows), "mean": sum(shares) / len(shares), "larger": sum(w > 1.0 / k + 1e-9 for w in shares)}


def gd2po_summary(rows: list) -> dict:
    """One GD²PO-Hard run's dropped share and query weight over its steps."""
    dropped = [row["gd2po/dropped_frac"] for row in rows]
    return {"steps": len(rows), "mean_dropped": sum(dropped) / len(dropped), "with_drops": sum(d > 0 for d in dropped),
            "query_weight": sum(row["gd2po/query_weight_mean"] for row in rows) / len(rows)}


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
    """A title naming the command, then a table per method family that has runs here."""
    lines = ["# Which reward each DARA and DVAO run up-weighted, and what GD²PO-Hard dropped", "",
             f"`python experiments/dara_weights.py {runs_dir}`", ""]
    dara = [(m, s, rows) for m, s, rows in runs if rewards_of(rows)]
    if dara:
        lines += ["## DARA", "", "| method | seed | reward | steps w > 1 | mean w | max w | steps the cap bound | steps "
                  "active |", "|---|---|---|---|---|---|---|---|"]
        for method, seed, rows in dara:
            for reward in rewards_of(rows):
                s = weight_summary(rows, reward)
                lines.append(f"| {method} | {seed} | {reward} | {s['up_weighted']} of {s['steps']} | {s['mean_w']:.3f} "
                             f"| {s['max_w']:.2f} | {s['cap_binds']} | {s['active']} |")
        lines += ["", "Steps in which any DARA weight moved off 1 (the mechanism acted): " + "; ".join(
            f"{method} seed {seed}: {moved_steps(rows)} of {len(rows)}" for method, seed, rows in dara) + ".", ""]
    dvao = [(m, s, rows) for m, s, rows in runs if rewards_of(rows, "dvao")]
    if dvao:
        lines += ["## DVAO", "", "| method | seed | reward | mean spread share lambda | steps with the larger share |",
                  "|---|---|---|---|---|"]
        for method, seed, rows in dvao:
            for reward in rewards_of(rows, "dvao"):
                s = dvao_summary(rows, reward)
                lines.append(f"| {method} | {seed} | {reward} | {s['mean']:.3f} | {s['larger']} of {s['steps']} |")
        lines.append("")
    gd2po = [(m, s, rows) for m, s, rows in runs if rows and "gd2po/dropped_frac" in rows[0]]
    if gd2po:
        lines += ["## GD²PO-Hard", "", "| method | seed | mean dropped share | steps with a drop | mean query weight |",
                  "|---|---|---|---|---|"]
        for method, seed, rows in gd2po:
            s = gd2po_summary(rows)
            lines.append(f"| {method} | {seed} | {s['mean_dropped']:.3f} | {s['with_drops']} of {s['steps']} | "
                         f"{s['query_weight']:.3f} |")
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("runs_dir", help="a compare.py cache or archive folder (one folder per run, each with run.json)")
    p.add_argument("--output", help="also write the report here")
    a = p.parse_args(argv)
    runs = [r for r in load_runs(a.runs_dir)
            if r[2] and (rewards_of(r[2]) or rewards_of(r[2], "dvao") or "gd2po/dropped_frac" in r[2][0])]
    if not runs:
        raise SystemExit(f"{a.runs_dir}: no finished run logs dara/w/*, dvao/w/* or gd2po/* (no DARA, DVAO or "
                         "GD²PO-Hard run there)")
    print_and_write(report(a.runs_dir, runs), a.output)


if __name__ == "__main__":
    main()
