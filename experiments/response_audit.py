"""What a sweep's eval responses say: per run and prompt kind, the share of final responses that contain a literal
string, beside the verifier's pass rate, and one example. Written for MAESTRO's sweep, whose arith responses
copied the prompt's `\\boxed{number}` placeholder; any string can be audited.

    python experiments/response_audit.py experiments/results/archive/maestro_vs_baselines --contains '\\boxed{number}' \\
        --reference base=experiments/results/archive/maestro_vs_baselines_base_model/results.json \\
        --output experiments/results/maestro_vs_baselines_responses.md

Reads a compare.py cache (eval/results.json with its problems) or archive (eval/problems.json.gz); a run without
its responses is listed as such. The prompt kind is the env's episode record `kind` (`--env mixed`), else `all`.
"""
import argparse
import gzip
import json
import os

from benchmarks.archive_pack import unpacked
from benchmarks.results_io import print_and_write
from experiments.compare_archive import PROBLEMS_GZ


def load_problems(path: str):
    """eval.py's per-problem records from a results.json or a problems.json.gz; None when it has none."""
    if path.endswith(".gz"):
        with gzip.open(path, "rt") as f:
            return json.load(f)
    with open(path) as f:
        return json.load(f).get("problems")


def run_problems(run_dir: str):
    for path in (os.path.join(run_dir, "eval", PROBLEMS_GZ), os.path.join(run_dir, "eval", "results.json")):
        if os.path.exists(path):
            problems = load_problems(path)
            if problems is not None:
                return problems
    return None


def audit(problems: list, literal: str) -> dict:
    """{kind: {"responses", "contain", "correct", "example"}} over every sample's final response."""
    out = {}
    for problem in problems:
        kinds = {e["sample"]: e.get("kind") for e in problem.get("episodes", [])}
        for s, (turns, correct) in enumerate(zip(problem["responses"], problem["correct_by_turn"])):
            row = out.setdefault(kinds.get(s) or "all", {"responses": 0, "contain": 0, "correct": 0, "example": None})
            final = turns[-1] if turns else ""
            row["responses"] += 1
            row["contain"] += literal in final
            row["correct"] += bool(correct and correct[-1])
            row["example"] = row["example"] or final
    return dict(sorted(out.items()))


def report(runs_dir: str, literal: str, references: list) -> str:
    rows = []  # (label, problems or None)
    for name in sorted(os.listdir(unpacked(runs_dir))):  # a committed archive: unpacked from its .tar.gz first
        record = os.path.join(runs_dir, name, "run.json")
        if os.path.exists(record):
            with open(record) as f:
                meta = json.load(f)
            rows.append((f"{meta['method']} seed {meta['seed']}", run_problems(os.path.join(runs_dir, name))))
    rows.sort(key=lambda r: r[0])
    rows = [(label, load_problems(path)) for label, path in references] + rows
    lines = [f"# Eval responses containing `{literal}`\n",
             f"`python experiments/response_audit.py {runs_dir} --contains '{literal}'`\n",
             f"| run | kind | responses | contain `{literal}` | verifier-correct | example (final turn) |",
             "|---|---|---|---|---|---|"]
    for label, problems in rows:
        if problems is None:
            lines.append(f"| {label} | - | (responses not archived) | | | |")
            continue
        for kind, r in audit(problems, literal).items():
            example = (r["example"] or "").replace("|", "\\|").replace("\n", " ")[:70]
            lines.append(f"| {label} | {kind} | {r['responses']} | {r['contain'] / r['responses']:.3f} | "
                         f"{r['correct'] / r['responses']:.3f} | `{example}` |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs_dir", help="a compare.py cache or archive folder")
    p.add_argument("--contains", required=True, help="the literal string to count in final responses")
    p.add_argument("--reference", action="append", default=[],
                   help="LABEL=RESULTS_JSON: another eval's results.json listed first (e.g. the base model)")
    p.add_argument("--output", help="also write the table here")
    a = p.parse_args(argv)
    references = []
    for spec in a.reference:
        label, sep, path = spec.partition("=")
        if not sep or not os.path.exists(unpacked(path)):
            p.error(f"--reference {spec!r}: want LABEL=PATH to an existing results.json")
        references.append((label, path))
    print_and_write(report(a.runs_dir, a.contains, references), a.output)


if __name__ == "__main__":
    main()
