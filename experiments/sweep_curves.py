"""Per-step curves of a sweep's runs: the mean over seeds (and each seed, faint) of metrics.jsonl keys, per method.

    python experiments/sweep_curves.py experiments/results/archive/dara_vs_gdpo \
        reward/ends_with_boxed/mean dara/rho/ends_with_boxed dara/rho/graded_correctness \
        --output experiments/results/dara_vs_gdpo_curves.png

Reads a compare.py cache or archive (each run folder's run.json names its method and seed); a key a method does
not log (e.g. dara/* under gdpo) is skipped for that method. Needs matplotlib (requirements-bench.txt).
"""
import argparse
import json
import os

from benchmarks.archive_pack import unpacked


def load_runs(runs_dir: str) -> list:
    """[(method, seed, rows)] of every finished run under runs_dir, in method then seed order."""
    runs = []
    for name in sorted(os.listdir(unpacked(runs_dir))):  # a committed archive: unpacked from its .tar.gz first
        record = os.path.join(runs_dir, name, "run.json")
        if not os.path.exists(record):
            continue
        with open(record) as f:
            meta = json.load(f)
        with open(os.path.join(runs_dir, name, "train", "metrics.jsonl")) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        runs.append((meta["method"], meta["seed"], rows))
    return sorted(runs, key=lambda r: (r[0], r[1]))


def curves(runs, key: str) -> dict:
    """{method: (steps, mean over seeds, [per-seed values])} for the runs that log `key` at every step."""
    out = {}
    for method in dict.fromkeys(m for m, _, _ in runs):
        series = [[r.get(key) for r in rows] for m, _, rows in runs if m == method]
        series = [s for s in series if s and all(v is not None for v in s)]
        if not series:
            continue
        length = min(len(s) for s in series)
        steps = list(range(1, length + 1))
        out[method] = (steps, [sum(s[i] for s in series) / len(series) for i in range(length)], series)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs_dir")
    p.add_argument("keys", nargs="+", help="metrics.jsonl keys, one panel each")
    p.add_argument("--output", required=True, help="PNG path")
    p.add_argument("--columns", type=int, default=4, help="panels per row (default 4)")
    a = p.parse_args(argv)
    if a.columns < 1:
        p.error(f"--columns must be at least 1, got {a.columns}")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = load_runs(a.runs_dir)
    columns = min(a.columns, len(a.keys))
    rows = -(-len(a.keys) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(a.keys):]:
        ax.set_visible(False)
    for ax, key in zip(axes.flat, a.keys):
        for i, (method, (steps, mean, series)) in enumerate(curves(runs, key).items()):
            color = f"C{i}"
            for s in series:
                ax.plot(steps, s[:len(steps)], color=color, alpha=0.2, lw=0.8)
            ax.plot(steps, mean, color=color, lw=2, label=f"{method} (mean of {len(series)})")
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(a.output, dpi=100)
    print(f"sweep_curves: {len(runs)} runs -> {a.output}")


if __name__ == "__main__":
    main()
