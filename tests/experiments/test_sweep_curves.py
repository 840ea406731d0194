"""experiments/sweep_curves.py: per-method means over seeds, keys a method does not log skipped."""
import json

from experiments import sweep_curves


def _run(root, name, method, seed, rows):
    (root / name / "train").mkdir(parents=True)
    (root / name / "run.json").write_text(json.dumps({"method": method, "seed": seed}))
    (root / name / "train" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_curves_average_seeds_per_method_and_skip_unlogged_keys(tmp_path):
    _run(tmp_path, "a", "gdpo", 1, [{"r": 0.0}, {"r": 1.0}])
    _run(tmp_path, "b", "gdpo", 2, [{"r": 1.0}, {"r": 1.0}])
    _run(tmp_path, "c", "dara", 1, [{"r": 0.5, "w": 2.0}, {"r": 0.5, "w": 1.0}])
    (tmp_path / "unfinished" / "train").mkdir(parents=True)  # no run.json: not read
    runs = sweep_curves.load_runs(str(tmp_path))
    assert [(m, s) for m, s, _ in runs] == [("dara", 1), ("gdpo", 1), ("gdpo", 2)]
    r = sweep_curves.curves(runs, "r")
    assert r["gdpo"][1] == [0.5, 1.0] and r["dara"][1] == [0.5, 0.5]
    assert list(sweep_curves.curves(runs, "w")) == ["dara"]
