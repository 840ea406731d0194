"""benchmarks/bench_advantages.py: times every registered estimator and writes a JSON and a table."""
import json
import math

from benchmarks.bench_advantages import main, make_inputs
from rl.methods import METHODS


def test_every_registered_method_is_timed_and_written_as_json(tmp_path):
    results = tmp_path / "adv"
    main(["--prompts", "16", "--group", "4", "--repeats", "2", "--step_seconds", "10", "--results", str(results)])
    data = json.loads((tmp_path / "adv.json").read_text())
    assert data["n_responses"] == 64 and data["reference_step_s"] == 10
    assert [m["method"] for m in data["methods"]] == sorted(METHODS)
    for m in data["methods"]:
        assert "error" not in m, m
        assert m["min_ms"] <= m["median_ms"] <= m["max_ms"]
        assert math.isclose(m["share_of_step"], m["median_ms"] / 1e3 / 10)
    table = (tmp_path / "adv.md").read_text()
    assert all(f"| {name} |" in table for name in METHODS)


def test_turn_scores_stop_after_the_first_success():
    inputs, final = make_inputs(prompts=32, group=4, turns=3, seed=0)
    ts = inputs.turn_scores
    for row in ts:
        solved = False
        for value in row.tolist():
            if solved:
                assert math.isnan(value)
            elif value == 1.0:
                solved = True
    assert inputs.extras["counterfactual"][~inputs.extras["counterfactual"].isnan()].numel() > 0
    assert set(final.tolist()) <= {0.0, 1.0}
