"""experiments/response_audit.py: the share of final responses containing a string, per run and prompt kind."""
import gzip
import json

from experiments import response_audit


def _problem(kind, finals, correct):
    return {"responses": [["draft", f] for f in finals], "correct_by_turn": [[0, c] for c in correct],
            "episodes": [{"kind": kind, "sample": s} for s in range(len(finals))]}


def test_final_responses_are_counted_per_kind_from_an_archive_and_a_results_file(tmp_path):
    run = tmp_path / "runs" / "k1"
    (run / "eval").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"method": "equal", "seed": 1}))
    problems = [_problem("arith", ["1 + 1 = \\boxed{number}", "\\boxed{2}"], [0, 1]),
                _problem("describe", ["a road. \\boxed{road}"], [1])]
    with gzip.open(run / "eval" / "problems.json.gz", "wt") as f:
        json.dump(problems, f)
    (tmp_path / "runs" / "k2").mkdir()
    (tmp_path / "runs" / "k2" / "run.json").write_text(json.dumps({"method": "random", "seed": 1}))  # no responses
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"metrics": {}, "problems": [_problem("arith", ["1 + 1 is 2"], [1])]}))

    counted = response_audit.audit(problems, "\\boxed{number}")
    assert {k: (v["responses"], v["contain"], v["correct"]) for k, v in counted.items()} == \
        {"arith": (2, 1, 1), "describe": (1, 0, 1)}  # the final turn only: "draft" never counts
    table = response_audit.report(str(tmp_path / "runs"), "\\boxed{number}", [("base", str(base))])
    lines = table.splitlines()
    assert lines.index(next(x for x in lines if x.startswith("| base | arith | 1 | 0.000 | 1.000"))) < \
        lines.index(next(x for x in lines if x.startswith("| equal seed 1 | arith | 2 | 0.500 | 0.500")))
    assert "| random seed 1 | - | (responses not archived)" in table
