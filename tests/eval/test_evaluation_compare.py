"""eval.py --compare: a side-by-side table says when the two results were not evaluated the same way."""
import json

from rl.eval.evaluation import model_label, setting_differences
from tests.eval.test_eval_cli import eval_in_process


def test_settings_that_decide_the_numbers_are_reported_when_they_differ():
    a = {"limit": 10, "temperature": 0.6, "n": 8, "output_dir": "x", "model_name_or_path": "m1"}
    b = {"limit": 50, "temperature": 0.0, "n": 8, "output_dir": "y", "model_name_or_path": "m2"}
    assert setting_differences(a, b) == ["limit 10 vs 50", "temperature 0.6 vs 0.0"]
    assert setting_differences(a, dict(a, output_dir="z")) == []


def test_a_column_is_named_by_the_model_not_by_its_full_path():
    assert model_label("output/grpo_arith_smollm2/final/") == "grpo_arith_smollm2/final"
    assert model_label("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"


def test_compare_warns_when_the_other_run_used_other_settings(tiny_model_dir, tmp_path, capsys):
    base = tmp_path / "base"
    common = ["--model_name_or_path", tiny_model_dir, "--env", "arith", "--max_new_tokens", "2"]
    first = eval_in_process([*common, "--limit", "2", "--output_dir", str(base)], capsys)
    assert first.returncode == 0, first.stderr[-3000:]
    same = eval_in_process([*common, "--limit", "2", "--compare", str(base / "results.json")], capsys)
    assert same.returncode == 0 and "not comparable" not in same.stdout
    other = eval_in_process([*common, "--limit", "3", "--compare", str(base / "results.json")], capsys)
    assert other.returncode == 0, other.stderr[-3000:]
    assert "not comparable: limit 3 vs 2" in other.stdout
    assert json.loads((base / "results.json").read_text())["config"]["limit"] == 2
