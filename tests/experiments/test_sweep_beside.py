"""experiments/sweep_beside.py: a rerun's per-seed change from an earlier sweep, method by method (issue 49)."""
import json

import pytest

from experiments import sweep_beside


def sweep(name, values, partial=False):
    """A compare.py RESULTS.json's fields that sweep_beside reads. values: {method: {seed: (deciding, also)}}."""
    runs = {m: [{"seed": s, "value": v, "also": {"eval:pass@1/arith": x}} for s, (v, x) in sorted(by_seed.items())]
            for m, by_seed in values.items()}
    return {"name": name, "deciding_metric": {"spec": "eval:pass@1"}, "baseline": "equal", "commit": "c" * 40,
            "methods": {m: f"--algo {m}" for m in values}, "runs": runs, "seeds": [1, 2, 3], "partial": partial,
            "comparisons": {}, "secondary_comparisons": {}}


def test_each_method_is_paired_over_the_seeds_both_sweeps_finished(tmp_path):
    old = sweep("old", {"equal": {1: (0.5, 0.1), 2: (0.4, 0.2), 3: (0.6, 0.3)},
                        "conductor": {1: (0.5, 0.0), 2: (0.5, 0.0), 3: (0.5, 0.0)}})
    new = sweep("new", {"equal": {1: (0.7, 0.1), 2: (0.4, 0.5)}, "conductor": {1: (0.2, 0.0), 3: (0.9, 0.0)}},
                partial=True)
    b = sweep_beside.beside(new, old)
    equal = b["changes"]["equal"]["eval:pass@1"]
    assert equal["seeds"] == [1, 2] and equal["diffs"] == pytest.approx([0.2, 0.0])
    assert b["changes"]["equal"]["eval:pass@1/arith"]["diffs"] == pytest.approx([0.0, 0.3])
    assert b["changes"]["conductor"]["eval:pass@1"]["diffs"] == pytest.approx([-0.3, 0.4])
    text = sweep_beside.report(b)
    assert b["partial"] and "conductor (seeds 1,3)" in text and "NEW is partial" in text
    (tmp_path / "new.json").write_text(json.dumps(new))
    (tmp_path / "old.json").write_text(json.dumps(old))
    sweep_beside.main([str(tmp_path / "new.json"), str(tmp_path / "old.json"), "--output", str(tmp_path / "b.md")])
    assert "## Each method, new - old" in (tmp_path / "b.md").read_text()


def test_sweeps_of_different_designs_are_refused():
    old = sweep("old", {"equal": {1: (0.5, 0.1)}, "conductor": {1: (0.5, 0.0)}})
    with pytest.raises(SystemExit, match="run different methods"):
        sweep_beside.beside(sweep("new", {"equal": {1: (0.5, 0.1)}, "random": {1: (0.5, 0.0)}}), old)
    other = sweep("new", {"equal": {1: (0.5, 0.1)}, "conductor": {1: (0.5, 0.0)}})
    other["deciding_metric"] = {"spec": "eval:pass@4"}
    with pytest.raises(SystemExit, match="different deciding metrics"):
        sweep_beside.beside(other, old)
