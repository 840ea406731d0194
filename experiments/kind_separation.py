"""Did MAESTRO's Conductor learn different reward trade-offs for different prompt kinds? Read from a sweep's runs.

    python experiments/kind_separation.py experiments/results/archive/maestro_vs_baselines \
        --kinds arith,describe --last 10 --output experiments/results/maestro_vs_baselines_separation.md

The measure fixed in experiments/results/maestro_vs_baselines.preregistration.md (addendum): per conductor run, the
mean over the last `--last` steps of `conductor/pi/<kind>/<reward>`; per reward, the difference between the second
and the first kind; the L1 distance between the two kinds' vectors. Mean and SE over seeds. A reward separates only
if its difference has one sign on every seed and |mean| > 2 SE (descriptive with a few seeds, not a test).
Per seed (revision 1 of that file, issue #42): each kind's top reward and its pi; the seed has *collapsed* when one
reward has pi > COLLAPSE on both kinds; and the revision's secondary check of the mechanism: is each kind's top
reward the one with the highest mean `maestro/level/<kind>/<reward>` over the first `--last` steps (what the
Conductor's meta-reward ranks: rl/advantages/maestro.py)?
"""
import argparse

from benchmarks.paired import mean_se
from benchmarks.results_io import print_and_write
from experiments.sweep_curves import load_runs

PREFIX = "conductor/pi"
LEVEL = "maestro/level"
COLLAPSE = 0.99


def kind_means(rows: list, kind: str, last: int, prefix: str = PREFIX, first: bool = False) -> dict:
    """{reward: mean of <prefix>/<kind>/<reward> over the last (first=True: the first) `last` rows that log it}."""
    head = f"{prefix}/{kind}/"
    logged = [r for r in rows if any(k.startswith(head) for k in r)]
    logged = logged[:last] if first else logged[-last:]
    rewards = sorted({k[len(head):] for r in logged for k in r if k.startswith(head)})
    return {name: sum(r[head + name] for r in logged) / len(logged) for name in rewards} if logged else {}


def fmt(value: float, signed: bool = True) -> str:
    """Three decimals, or two significant digits in e-notation when a non-zero value would print as 0.000: a
    Conductor that barely moves must read as "moved by 3e-05", not as a bare "-0.000"."""
    sign = "+" if signed else ""
    if value != 0 and abs(value) < 5e-4:
        return f"{value:{sign}.1e}"
    return f"{value:{sign}.3f}"


def separation(runs: list, kinds: tuple, last: int) -> dict:
    """runs: load_runs' [(method, seed, rows)]. Returns {"seeds": [...], "diff": {reward: [per-seed second - first]},
    "l1": [per-seed distance]} over the runs that log conductor/pi per kind."""
    first, second = kinds
    out = {"seeds": [], "diff": {}, "l1": [], "top": []}
    for _, seed, rows in runs:
        a, b = kind_means(rows, first, last), kind_means(rows, second, last)
        if not a or not b:
            continue
        out["seeds"].append(seed)
        for name in a:
            out["diff"].setdefault(name, []).append(b[name] - a[name])
        out["l1"].append(sum(abs(b[name] - a[name]) for name in a))
        tops = [max(means, key=means.get) for means in (a, b)]
        levels = [kind_means(rows, kind, last, LEVEL, first=True) for kind in kinds]
        out["top"].append({"kinds": [(tops[0], a[tops[0]]), (tops[1], b[tops[1]])],
                           "collapsed": tops[0] == tops[1] and min(a[tops[0]], b[tops[1]]) > COLLAPSE,
                           "highest_level": [max(lv, key=lv.get) if lv else None for lv in levels]})
    return out


def report(runs_dir: str, kinds: tuple, last: int) -> str:
    """A markdown table: per reward, the per-seed differences, their mean ± SE and whether they separate."""
    s = separation(load_runs(runs_dir), kinds, last)
    first, second = kinds
    lines = [f"# The Conductor's emphasis by prompt kind: {second} - {first}", "",
             f"`python experiments/kind_separation.py {runs_dir} --kinds {first},{second} --last {last}`", "",
             f"Mean of `{PREFIX}/<kind>/<reward>` over each run's last {last} steps; seeds {s['seeds']}.", "",
             "| reward | per seed | mean ± SE | separates |", "|---|---|---|---|"]
    for name, diffs in s["diff"].items():
        mean, se = mean_se(diffs)
        one_sign = all(d > 0 for d in diffs) or all(d < 0 for d in diffs)
        separates = "yes" if one_sign and len(diffs) > 1 and abs(mean) > 2 * se else "no"
        lines.append(f"| {name} | {', '.join(fmt(d) for d in diffs)} | {fmt(mean)} ± {fmt(se, False)} | {separates} |")
    if s["l1"]:
        mean, se = mean_se(s["l1"])
        lines.append(f"| (L1 distance) | {', '.join(fmt(d, False) for d in s['l1'])} | {fmt(mean, False)} ± {fmt(se, False)} | |")
    else:
        lines.append("| (no run logs conductor/pi per kind) | | | |")
    if s["top"]:
        lines += ["", f"Each kind's top reward (its mean pi); collapsed = one reward above {COLLAPSE} on both kinds:", "",
                  f"| seed | {first} | {second} | collapsed |", "|---|---|---|---|"]
        for seed, top in zip(s["seeds"], s["top"]):
            cells = [f"{name} ({fmt(p, False)})" for name, p in top["kinds"]]
            lines.append(f"| {seed} | {cells[0]} | {cells[1]} | {'yes' if top['collapsed'] else 'no'} |")
        lines.append(f"\n{sum(t['collapsed'] for t in s['top'])} of {len(s['top'])} seeds collapsed.")
        lines += ["", f"The mechanism's prediction: each kind's highest `{LEVEL}/<kind>/<reward>` over the first {last} "
                  "steps (what the meta-reward ranks), and whether it is that kind's top reward:", "",
                  f"| seed | {first} | {second} |", "|---|---|---|"]
        for seed, top in zip(s["seeds"], s["top"]):
            cells = [f"{lv} ({'=' if lv == name else '!='} top)" if lv else "(not logged)"
                     for lv, (name, _) in zip(top["highest_level"], top["kinds"])]
            lines.append(f"| {seed} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs_dir", help="a compare.py cache or archive folder")
    p.add_argument("--kinds", default="arith,describe", help="the two prompt kinds, first,second")
    p.add_argument("--last", type=int, default=10, help="steps at the end of each run to average")
    p.add_argument("--output", help="also write the table here")
    a = p.parse_args(argv)
    kinds = tuple(k.strip() for k in a.kinds.split(","))
    if len(kinds) != 2 or not all(kinds):
        p.error(f"--kinds needs exactly two kinds, first,second; got {a.kinds!r}")
    if a.last < 1:
        p.error(f"--last must be at least 1, got {a.last}")
    print_and_write(report(a.runs_dir, kinds, a.last), a.output)


if __name__ == "__main__":
    main()
