"""Two compare.py sweeps of the same arms and seeds, side by side: each method's per-seed change from one to the other.

A rerun that changes the code and keeps the flags (issue 49: MAESTRO's `ent` sign) is reported beside the earlier
sweep: for every method and every metric (the deciding one and the `--also` ones), the value in NEW minus the value in
OLD, paired seed by seed (benchmarks/paired.py), and each sweep's own comparisons against its baseline.
Only seeds finished in both are paired (a partial NEW is labelled so). The two sweeps ran at different commits and
machine loads: a difference is descriptive, not a pre-registered test.

    python experiments/sweep_beside.py experiments/results/NEW.json experiments/results/OLD.json [--output FILE.md]
"""
import argparse
import json

from benchmarks.results_io import print_and_write
from benchmarks.paired import PAIRED_HEADER, format_paired_row, paired


def per_seed(result: dict, method: str, metric: str) -> dict:
    """{seed: value} of one method's runs; metric is the deciding spec or an --also spec."""
    deciding = result["deciding_metric"]["spec"]
    runs = result["runs"].get(method, [])
    return {r["seed"]: (r["value"] if metric == deciding else r["also"][metric]) for r in runs}


def beside(new: dict, old: dict) -> dict:
    """Per method and metric, NEW - OLD paired over the seeds both finished; refuses sweeps of different designs."""
    if new["deciding_metric"]["spec"] != old["deciding_metric"]["spec"] or new["baseline"] != old["baseline"]:
        raise SystemExit(f"{new['name']} and {old['name']} name different deciding metrics or baselines")
    if new["methods"] != old["methods"]:
        raise SystemExit(f"{new['name']} and {old['name']} run different methods: {new['methods']} / {old['methods']}")
    metrics = [new["deciding_metric"]["spec"]] + sorted(next(iter(new["runs"].values()))[0]["also"])
    out = {"new": new["name"], "old": old["name"], "metrics": metrics, "partial": bool(new.get("partial")),
           "commits": {"new": new["commit"], "old": old["commit"]}, "changes": {}}
    for method in new["methods"]:
        for metric in metrics:
            a, b = per_seed(new, method, metric), per_seed(old, method, metric)
            seeds = sorted(set(a) & set(b))
            if seeds:
                change = paired([a[s] for s in seeds], [b[s] for s in seeds])
                out["changes"].setdefault(method, {})[metric] = dict(change, seeds=seeds)
    out["within"] = {name: {"deciding": r["comparisons"], "secondary": r.get("secondary_comparisons", {}),
                            "seeds": r["seeds"], "partial": bool(r.get("partial"))}
                     for name, r in (("new", new), ("old", old))}
    return out


def report(b: dict) -> str:
    lines = [f"# {b['new']} beside {b['old']}\n",
             f"`python experiments/sweep_beside.py experiments/results/{b['new']}.json "
             f"experiments/results/{b['old']}.json`\n",
             f"Commits: {b['new']} {b['commits']['new'][:12]}, {b['old']} {b['commits']['old'][:12]}. Descriptive: the "
             "sweeps ran at different commits and machine loads." + (" NEW is partial." if b["partial"] else "") + "\n"]
    for metric in b["metrics"]:
        lines += [f"\n## Each method, {b['new']} - {b['old']}, paired by seed: `{metric}`\n", PAIRED_HEADER]
        lines += [format_paired_row(f"{method} (seeds {','.join(map(str, c[metric]['seeds']))})", c[metric])
                  for method, c in b["changes"].items() if metric in c]
    lines.append("\n## Each sweep's own comparisons with its baseline (the deciding metric)\n")
    lines.append(PAIRED_HEADER)
    for which in ("new", "old"):
        for label, c in b["within"][which]["deciding"].items():
            lines.append(format_paired_row(f"{b[which]}: {label}", c))
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("new", help="compare.py's RESULTS.json of the rerun")
    p.add_argument("old", help="compare.py's RESULTS.json of the earlier sweep (same methods, seeds and metric)")
    p.add_argument("--output", default=None, help="also write the report here (default: stdout only)")
    p.add_argument("--json", default=None, help="also write the numbers here (default: none)")
    a = p.parse_args(argv)
    b = beside(json.load(open(a.new)), json.load(open(a.old)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(b, f, indent=1)
    print_and_write(report(b), a.output)
    return b


if __name__ == "__main__":
    main()
