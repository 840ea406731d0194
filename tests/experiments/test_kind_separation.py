"""experiments/kind_separation.py: the Conductor's per-kind emphasis over the last steps, per seed and over seeds."""
import json

import pytest

from experiments import kind_separation


def _rows(arith_fmt, describe_fmt, steps=4):
    """Rows whose last two steps carry the given pi; earlier steps carry noise that --last 2 must ignore."""
    rows = [{"conductor/pi/arith/fmt": 0.9, "conductor/pi/arith/len": 0.1,
             "conductor/pi/describe/fmt": 0.1, "conductor/pi/describe/len": 0.9} for _ in range(steps - 2)]
    rows += [{"conductor/pi/arith/fmt": arith_fmt, "conductor/pi/arith/len": 1 - arith_fmt,
              "conductor/pi/describe/fmt": describe_fmt, "conductor/pi/describe/len": 1 - describe_fmt}
             for _ in range(2)]
    return rows


def _write(root, name, method, seed, rows):
    (root / name / "train").mkdir(parents=True)
    (root / name / "run.json").write_text(json.dumps({"method": method, "seed": seed}))
    (root / name / "train" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_differences_are_taken_over_the_last_steps_per_seed():
    runs = [("conductor", 1, _rows(0.5, 0.7)), ("conductor", 2, _rows(0.5, 0.6)), ("equal", 1, [{"x": 1}])]
    s = kind_separation.separation(runs, ("arith", "describe"), last=2)
    assert s["seeds"] == [1, 2]  # the equal arm logs no conductor/pi: left out
    assert s["diff"]["fmt"] == pytest.approx([0.2, 0.1]) and s["diff"]["len"] == pytest.approx([-0.2, -0.1])
    assert s["l1"] == pytest.approx([0.4, 0.2])


def test_a_reward_separates_only_with_one_sign_on_every_seed_and_a_mean_beyond_two_se(tmp_path):
    _write(tmp_path, "a", "conductor", 1, _rows(0.50, 0.70))
    _write(tmp_path, "b", "conductor", 2, _rows(0.50, 0.71))
    _write(tmp_path, "c", "conductor", 3, _rows(0.50, 0.69))
    text = kind_separation.report(str(tmp_path), ("arith", "describe"), 2)
    assert "| fmt | +0.200, +0.210, +0.190 | +0.200 ± 0.006 | yes |" in text
    _write(tmp_path, "d", "conductor", 4, _rows(0.50, 0.40))  # one seed the other way
    fmt_row = next(line for line in kind_separation.report(str(tmp_path), ("arith", "describe"), 2).splitlines()
                   if line.startswith("| fmt |"))
    assert fmt_row.endswith("| no |")


def test_bad_kinds_are_refused_by_flag(tmp_path, capsys):
    with pytest.raises(SystemExit):
        kind_separation.main([str(tmp_path), "--kinds", "arith"])
    assert "--kinds needs exactly two kinds" in capsys.readouterr().err


def test_a_barely_moving_conductor_prints_its_size_not_minus_zero():
    assert kind_separation.fmt(-3.2e-5) == "-3.2e-05" and kind_separation.fmt(0.2) == "+0.200"
    assert kind_separation.fmt(0.0) == "+0.000" and kind_separation.fmt(4e-6, signed=False) == "4.0e-06"


def test_the_mechanism_check_names_each_kinds_highest_early_level_against_its_top_reward(tmp_path):
    rows = _rows(0.2, 0.7)  # top reward: len for arith, fmt for describe
    for i, row in enumerate(rows):  # first 2 steps: fmt has arith's highest level; later steps must be ignored
        early = i < 2
        row.update({"maestro/level/arith/fmt": 0.6 if early else 0.1, "maestro/level/arith/len": 0.5,
                    "maestro/level/describe/fmt": 0.7 if early else 0.1, "maestro/level/describe/len": 0.4})
    _write(tmp_path, "a", "conductor", 1, rows)
    text = kind_separation.report(str(tmp_path), ("arith", "describe"), 2)
    assert "| 1 | fmt (!= top) | fmt (= top) |" in text
