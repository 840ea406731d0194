"""The warm-start sweep's report (experiments/sweeps/warm_start.sh): per env and model (the base, then each SFT
export), what RL would start from, read off eval.py's results.json files.

    python experiments/warm_start_report.py ROOT [--output experiments/results/warm_start.md] [--archive DIR]

--archive DIR copies what the report reads (each eval's results.json, and each SFT run's config.json and
metrics.jsonl) into DIR in ROOT's layout and packs it (DIR.tar.gz, benchmarks/archive_pack.py); the report then
reproduces from a fresh clone with `python experiments/warm_start_report.py experiments/results/archive/warm_start`.

ROOT/<env>/eval/<model>_{greedy,sampled}/results.json. Sampled evals draw 4 responses per question (a GRPO group)
at the RL sweeps' temperature. Columns:
- format: the share of responses in the env's format (toolcall: BFCL's layout parsed, `tool_format`; mixed: a
  \\boxed{...} answer, MAESTRO's `fmt` with --format_style boxed);
- correct: the share the verifier accepts (toolcall: `tool_correct`; mixed: pass@1);
- groups with correct: the share of 4-response groups with at least one correct response (the groups in which a
  sparse correctness reward is non-zero);
- groups with spread: the share of groups whose format (or correctness) differs between responses (the groups in
  which a group-normalised advantage of that reward is non-zero).
The pick is the shortest export meeting the pre-registered targets (the sweep script's header).
"""
import argparse
import json
import math
import os
import re
import shutil

from benchmarks.archive_pack import pack, unpacked

BOXED = re.compile(r"\\boxed\{[^{}]+\}")  # rewards/format.py's FORMATS["boxed"]
TARGETS = {"toolcall": "T=0.4: groups with correct >= 1/3 and 0.6 < format < 0.95",
           "mixed": "T=0.7: 0.6 < format < 0.95"}


def _per_sample(problem: dict, env: str) -> list:
    """[(format, correct)] for each sampled response of one question."""
    if env.startswith("toolcall"):
        return [(e["format"], e["correct"]) for e in problem.get("episodes", [])]
    correct = [turns[-1] if turns else 0 for turns in problem["correct_by_turn"]]
    formats = [int(bool(BOXED.search(r[-1]))) if r else 0 for r in problem["responses"]]
    return list(zip(formats, correct))


def summarise(results: dict, env: str) -> dict:
    samples = [_per_sample(p, env) for p in results["problems"]]
    flat = [s for group in samples for s in group]
    n = len(flat)
    out = {"questions": len(samples), "responses": n,
           "format": sum(f for f, _ in flat) / n, "correct": sum(c for _, c in flat) / n}
    out["format_se"] = math.sqrt(out["format"] * (1 - out["format"]) / n)
    if all(len(g) > 1 for g in samples):
        out["groups_with_correct"] = sum(any(c for _, c in g) for g in samples) / len(samples)
        out["groups_format_spread"] = sum(len({f for f, _ in g}) > 1 for g in samples) / len(samples)
        out["groups_correct_spread"] = sum(len({c for _, c in g}) > 1 for g in samples) / len(samples)
    return out


def meets(env: str, sampled: dict) -> bool:
    in_band = 0.6 < sampled["format"] < 0.95
    return in_band and (not env.startswith("toolcall") or sampled.get("groups_with_correct", 0) >= 1 / 3)


def shortfall(env: str, sampled: dict) -> float:
    """How far a sampled eval is from its env's target: the format's distance from the band plus, for toolcall, the
    missing share of groups with a correct response (0 when the target is met). The rule's "nearest" export."""
    gap = max(0.6 - sampled["format"], sampled["format"] - 0.95, 0.0)
    if env.startswith("toolcall"):
        gap += max(1 / 3 - sampled.get("groups_with_correct", 0), 0.0)
    return gap


def _step(name: str) -> int:
    return 0 if name == "base" else int(name.split("_")[1])


def report(root: str) -> str:
    lines = ["# Warm start: where RL starts (issue #60 item 3)", "",
             f"`python experiments/warm_start_report.py {root}`, from the evals of `bash experiments/sweeps/warm_start.sh`.",
             ""]
    picks, nearest = {}, {}
    for env in sorted(os.listdir(root)):
        folder = os.path.join(root, env, "eval")
        if not os.path.isdir(folder):
            continue
        names = sorted({d.rsplit("_", 1)[0] for d in os.listdir(folder)}, key=_step)
        lines += [f"## {env}", "", f"Target ({TARGETS.get(env.split('_')[0], '?')}).", "",
                  "| model | greedy format | greedy correct | sampled format (SE) | sampled correct | groups with "
                  "correct | groups, format spread | groups, correct spread | meets target |",
                  "|---|---|---|---|---|---|---|---|---|"]
        pick = None
        for name in names:
            row = {}
            for kind in ("greedy", "sampled"):
                path = os.path.join(folder, f"{name}_{kind}", "results.json")
                if os.path.exists(path):
                    with open(path) as f:
                        row[kind] = summarise(json.load(f), env)
            g, s = row.get("greedy", {}), row.get("sampled", {})
            ok = bool(s) and meets(env, s)
            if s and name != "base":
                nearest.setdefault(env.split("_")[0], []).append((shortfall(env, s), _step(name), f"{name} ({env})"))
            if ok and pick is None and name != "base":
                pick = name

            def cell(d, k, fmt="{:.3f}"):
                return fmt.format(d[k]) if k in d else "-"
            lines.append(f"| {name} | {cell(g, 'format')} | {cell(g, 'correct')} | "
                         f"{cell(s, 'format')} ({cell(s, 'format_se')}) | {cell(s, 'correct')} | "
                         f"{cell(s, 'groups_with_correct')} | {cell(s, 'groups_format_spread')} | "
                         f"{cell(s, 'groups_correct_spread')} | {'yes' if ok else 'no'} |")
        picks.setdefault(env.split("_")[0], []).append((_step(pick), f"{pick} ({env})") if pick else None)
        lines.append("")
    lines += ["## Picks", "", "The shortest export that meets its env's target, over every run of that env (the sweep's "
              "revisions add finer grids as env_fine / env_step5):", ""]
    for env, found in sorted(picks.items()):
        found = sorted(f for f in found if f)
        near = min(nearest.get(env, [(0, 0, "no sampled eval")]))
        lines.append(f"- {env}: **{found[0][1]}**" if found else
                     f"- {env}: none meets the target; nearest **{near[2]}** (short by {near[0]:.3f})")
    return "\n".join(lines) + "\n"


def archive(root: str, dest: str):
    """Copy the report's inputs (results.json of each eval, config.json and metrics.jsonl of each SFT run) into dest
    in root's layout, then pack dest."""
    for folder, _, names in os.walk(root):
        rel = os.path.relpath(folder, root)
        wanted = [n for n in names if (n == "results.json" and "/eval/" in f"/{rel}/")
                  or (n in ("config.json", "metrics.jsonl") and rel.endswith(os.path.join("sft")))]
        for name in wanted:
            os.makedirs(os.path.join(dest, rel), exist_ok=True)
            shutil.copyfile(os.path.join(folder, name), os.path.join(dest, rel, name))
    pack(dest)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root")
    p.add_argument("--output", default=None)
    p.add_argument("--archive", default=None, help="copy the report's inputs here and pack them")
    args = p.parse_args(argv)
    if args.archive:
        archive(args.root, args.archive)
        args.root = args.archive
    text = report(unpacked(args.root))
    print(text, end="")
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
