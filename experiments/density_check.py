"""DARA's mechanism, read from a sweep's archived runs: while the sparse reward is still being learned, is it the
lower-density one, and how much weight does it get?

    python experiments/density_check.py experiments/results/archive/dara_vs_gdpo \
        --sparse ends_with_boxed --dense graded_correctness --until 0.5 \
        --output experiments/results/dara_vs_gdpo_density.md

For every run that logs `dara/rho/<reward>` (the density: the share of groups in which the reward varies), the
stretch is the steps before `reward/<sparse>/mean` (the batch mean) first reaches `--until`. Over that stretch it
counts the steps on which rho(sparse) < rho(dense), and gives the means of rho(dense) and of the DARA weights
w(sparse), w(dense). Runs that do not log dara/* (e.g. GDPO) are skipped.
"""
import argparse

from benchmarks.results_io import print_and_write
from experiments.sweep_curves import load_runs


def stretch_summary(rows: list, sparse: str, dense: str, until: float) -> dict:
    """One run's metrics rows (one dict per step) -> the counts over the steps before the sparse mean reaches `until`.

    Returns {"steps", "sparse_lower", "rho_dense_mean", "w_sparse_mean", "w_dense_mean"}; "steps" is 0 (and the
    means None) when the first step already meets `until`.
    """
    stretch = []
    for row in rows:
        if row[f"reward/{sparse}/mean"] >= until:
            break
        stretch.append(row)
    if not stretch:
        return {"steps": 0, "sparse_lower": 0, "rho_dense_mean": None, "w_sparse_mean": None, "w_dense_mean": None}
    rho_s = [r[f"dara/rho/{sparse}"] for r in stretch]
    rho_d = [r[f"dara/rho/{dense}"] for r in stretch]
    return {"steps": len(stretch), "sparse_lower": sum(s < d for s, d in zip(rho_s, rho_d)),
            "rho_dense_mean": sum(rho_d) / len(rho_d),
            "w_sparse_mean": sum(r[f"dara/w/{sparse}"] for r in stretch) / len(stretch),
            "w_dense_mean": sum(r[f"dara/w/{dense}"] for r in stretch) / len(stretch)}


def report(runs_dir: str, sparse: str, dense: str, until: float) -> str:
    """A markdown table, one row per DARA run and a total row."""
    lines = [f"# DARA's densities before `reward/{sparse}/mean` first reaches {until}",
             "", f"`python experiments/density_check.py {runs_dir} --sparse {sparse} --dense {dense} --until {until}`",
             "", f"| method | seed | steps | rho({sparse}) < rho({dense}) | mean rho({dense}) | mean w({sparse}) |"
             f" mean w({dense}) |", "|---|---|---|---|---|---|---|"]
    total_steps = total_lower = 0
    for method, seed, rows in load_runs(runs_dir):
        if not rows or f"dara/rho/{sparse}" not in rows[0]:
            continue
        s = stretch_summary(rows, sparse, dense, until)
        total_steps += s["steps"]
        total_lower += s["sparse_lower"]
        if s["steps"] == 0:
            lines.append(f"| {method} | {seed} | 0 | - | - | - | - |")
            continue
        lines.append(f"| {method} | {seed} | {s['steps']} | {s['sparse_lower']} | "
                     f"{s['rho_dense_mean']:.2f} | {s['w_sparse_mean']:.2f} | {s['w_dense_mean']:.2f} |")
    lines.append(f"| all | | {total_steps} | {total_lower} | | | |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs_dir", help="a compare.py cache or archive folder")
    p.add_argument("--sparse", required=True, help="the sparse reward's name (as in reward/<name>/mean)")
    p.add_argument("--dense", required=True, help="the dense reward's name")
    p.add_argument("--until", type=float, default=0.5, help="the sparse reward's batch mean that ends the stretch")
    p.add_argument("--output", help="also write the table here")
    a = p.parse_args(argv)
    print_and_write(report(a.runs_dir, a.sparse, a.dense, a.until), a.output)


if __name__ == "__main__":
    main()
