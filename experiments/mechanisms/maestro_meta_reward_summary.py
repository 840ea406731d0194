"""Several runs' maestro_meta_reward results side by side (issue 42): where each Conductor ended, the meta-reward's
pooled signal per emphasis action over steps 1-10 (as run, and without GRPO's std division), and the split of each
run's summed bias gradient into its expected and drawn parts.

    python -m experiments.mechanisms.maestro_meta_reward_summary RESULT.json [RESULT.json ...] --results PREFIX
        [--baseline BASE.json ...]   # the same seeds in the same order: final pi paired, these - the baseline's
"""
import argparse
import json
import os

import torch

from experiments.mechanisms.maestro_meta_reward import ALL, REPO, cumulative, find, read_jsonl, window_stats
from benchmarks.paired import PAIRED_HEADER, format_paired_row, mean_se, paired
from experiments.mechanisms.report import write


def final_pi(result: dict, last_steps: int = 10) -> list:
    """Mean pi per reward over the last `last_steps` logged steps and both prompt kinds."""
    steps = sorted(result["pi"], key=int)[-last_steps:]
    rows = [p for s in steps for p in result["pi"][s].values()]
    return torch.tensor(rows, dtype=torch.float64).mean(0).tolist()


def at_top(run_dir: str, names: list, windows, flipped=()) -> list:
    """[(first, last, [share of responses scoring exactly 1 on each reward])] per window of steps, from the run's
    logged rows: the tied top block that GRPO's std scaling favours (rl/advantages/maestro.py). A flipped reward
    (maestro_meta_reward --flip) scores 1 where its logged value is 0."""
    rows = read_jsonl(find(os.path.join(REPO, run_dir), "completions.jsonl"))
    top = {n: 0.0 if n in flipped else 1.0 for n in names}
    out = []
    for first, last in windows:
        picked = [r for r in rows if first <= r["step"] <= last]
        out.append((first, last, [sum(r["components"][n] == top[n] for r in picked) / max(len(picked), 1)
                                  for n in names]))
    return out


def summarize(paths: list, baseline: list = ()) -> dict:
    results = [json.load(open(p)) for p in paths]
    names = results[0]["rewards"]
    if any(r["rewards"] != names for r in results):
        raise SystemExit("the results name different rewards: summarize runs of one reward set")
    k = len(names)
    runs = []
    for path, r in zip(paths, results):
        last = max(r["steps"])
        early = {cond: [m for m, _ in window_stats(r["signal"][cond], ALL, 1, min(10, last), k)]
                 for cond in ("as run", "no std")}
        split = [cumulative(r["gradient"], 1, last, j) for j in range(k)]
        windows = [(1, 5), (6, 10)] + ([(11, last)] if last > 10 else [])
        runs.append({"result": path, "run": os.path.basename(r["run"]),
                     "at_top": at_top(r["run"], names, windows, r.get("flipped", ())),
                     "meta_reward": r.get("meta_reward", "advantage"),
                     "final_pi": final_pi(r), "early_signal": early,
                     "expected": [e for e, _ in split], "drawn": [rz - e for e, (rz, _) in split],
                     "drawn_se": [se for _, (_, se) in split]})
    across = {cond: [mean_se([run["early_signal"][cond][j] for run in runs]) for j in range(k)]
              for cond in ("as run", "no std")}
    flipped = sorted({n for r in results for n in r.get("flipped", ())})
    if any(sorted(r.get("flipped", ())) != flipped for r in results):
        raise SystemExit("the results reverse different rewards (--flip): summarize runs read one way")
    out = {"name": "maestro_meta_reward_summary", "rewards": names, "runs": runs, "early_signal_across_runs": across,
           "flipped": flipped}
    if baseline:
        if len(baseline) != len(paths):
            raise SystemExit(f"--baseline names {len(baseline)} results for {len(paths)} runs: pair them seed by seed")
        base = [final_pi(json.load(open(p))) for p in baseline]
        out["baseline"] = list(baseline)
        out["paired_final_pi"] = {name: paired([r["final_pi"][j] for r in runs], [b[j] for b in base])
                                  for j, name in enumerate(names)}
    return out


def report(s: dict) -> str:
    names = s["rewards"]
    head = " | ".join(names)
    lines = ["# MAESTRO's Conductor on real batches: signal and drift, run by run\n",
             "`python -m experiments.mechanisms.maestro_meta_reward_summary " + " ".join(r["result"] for r in s["runs"])
             + "`\n"]
    if s.get("flipped"):
        lines.append(f"**Reversed sign: {', '.join(s['flipped'])}** (maestro_meta_reward --flip): the signal, the "
                     "top-block shares and the expected and drawn gradients score the logged responses with the "
                     "opposite sign; where each Conductor ended, its pi and its draws are the runs' own, trained with "
                     "the other sign.\n")
    lines += ["## Where each Conductor ended (pi over the last 10 steps, both kinds)\n",
             f"| run | meta-reward | {head} | top |", "|---" * (len(names) + 3) + "|"]
    for r in s["runs"]:
        top = names[max(range(len(names)), key=lambda j: r["final_pi"][j])]
        lines.append(f"| {r['run']} | {r['meta_reward']} | " + " | ".join(f"{p:.3f}" for p in r["final_pi"])
                     + f" | {top} |")
    lines += ["\n## Share of responses scoring exactly 1 (the tied top block), by steps\n",
              f"| run | steps | {head} |", "|---" * (len(names) + 2) + "|"]
    for r in s["runs"]:
        for first, last, shares in r["at_top"]:
            lines.append(f"| {r['run']} | {first}-{last} | " + " | ".join(f"{v:.2f}" for v in shares) + " |")
    lines += ["\n## The meta-reward's pooled signal D_k over steps 1-10 (all responses; mean over steps)\n",
              f"| run | condition | {head} |", "|---" * (len(names) + 2) + "|"]
    for r in s["runs"]:
        for cond, values in r["early_signal"].items():
            lines.append(f"| {r['run']} | {cond} | " + " | ".join(f"{v:+.4f}" for v in values) + " |")
    for cond, stats in s["early_signal_across_runs"].items():
        lines.append(f"| mean ± SE over runs | {cond} | " + " | ".join(f"{m:+.4f} ± {e:.4f}" for m, e in stats) + " |")
    lines += ["\n## The Conductor's summed bias gradient over the run: expected part / drawn part ± SE\n",
              f"| run | {head} |", "|---" * (len(names) + 1) + "|"]
    for r in s["runs"]:
        lines.append(f"| {r['run']} | " + " | ".join(f"{e:+.3f} / {d:+.3f} ± {se:.3f}" for e, d, se
                                                    in zip(r["expected"], r["drawn"], r["drawn_se"])) + " |")
    if "paired_final_pi" in s:
        lines += ["\n## Final pi, these runs - the baseline's, paired seed by seed (baseline: "
                  + ", ".join(s["baseline"]) + ")\n", PAIRED_HEADER]
        lines += [format_paired_row(f"pi({name})", c) for name, c in s["paired_final_pi"].items()]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results_json", nargs="+", help="maestro_meta_reward's PREFIX.json files, one per run")
    p.add_argument("--results", required=True, help="output prefix for .json and .md")
    p.add_argument("--baseline", nargs="*", default=(), help="results of the baseline arm, one per run, same order")
    a = p.parse_args()
    write(summarize(a.results_json, a.baseline), a.results, report)


if __name__ == "__main__":
    main()
