"""eval.py scores a model as its job did (issue #65 items 3 and 4): in the dtype the model was trained and exported in,
named in every result, and with `--reward_funcs` each reward function's mean over the eval set, as training logs it."""
import json
import shutil

import pytest

import eval as eval_cli
from tests.eval.test_eval_cli import eval_in_process


def _run_export(tiny_model_dir, tmp_path, machine_dtype="bf16"):
    """A run folder as train.py leaves it: its config.json (the resolved dtype in the machine record) and final/."""
    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "final")
    (run / "config.json").write_text(json.dumps({"flags": {"dtype": "auto", "format_style": "tags"},
                                                 "machine": {"dtype": machine_dtype}}))
    return run


def test_a_run_s_export_is_evaluated_in_the_dtype_it_was_trained_in(tiny_model_dir, tmp_path, capsys):
    run = _run_export(tiny_model_dir, tmp_path)
    out = tmp_path / "eval"
    proc = eval_in_process(["--model_name_or_path", str(run / "final"), "--limit", "2", "--max_new_tokens", "2",
                            "--output_dir", str(out), "--label", "acc"], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"eval: dtype bf16 (the training run's, {run / 'config.json'})" in proc.stdout
    assert "| metric | value (bf16) |" in proc.stdout and "(dtype bf16)" in proc.stdout
    assert json.loads((out / "results.json").read_text())["config"]["dtype"] == "bf16"


def test_without_a_run_the_model_s_own_config_decides_and_a_flag_overrides_it(tiny_model_dir, tmp_path):
    assert eval_cli.trained_dtype(tiny_model_dir)[0] == "fp32"
    model = tmp_path / "half"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config.pop("torch_dtype", None)
    config["dtype"] = "bfloat16"
    (model / "config.json").write_text(json.dumps(config))
    assert eval_cli.trained_dtype(str(model)) == ("bf16", f"the model's own config, {model}")


def test_reward_funcs_report_each_reward_s_mean_as_training_logs_it(tiny_model_dir, tmp_path, capsys):
    run = _run_export(tiny_model_dir, tmp_path, machine_dtype="fp32")
    out = tmp_path / "eval"
    proc = eval_in_process(["--model_name_or_path", str(run / "final"), "--limit", "3", "--max_new_tokens", "3",
                            "--reward_funcs", "correctness,format,tests.fixture_rewards:prints_then_scores,"
                            "tests.fixture_rewards:always_raises", "--reward_workers", "2",
                            "--output_dir", str(out)], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "results.json").read_text())["metrics"]
    assert metrics["reward/prints_then_scores/mean"] == pytest.approx(0.25)
    assert metrics["reward/correctness/mean"] == pytest.approx(metrics["mean_final_score"])
    assert 0 <= metrics["reward/format/mean"] <= 1
    assert metrics["reward/always_raises/mean"] == 0 and metrics["reward/always_raises/errors"] == 3
    assert "| reward/prints_then_scores/mean | 0.2500 |" in proc.stdout


def test_a_reward_that_needs_the_policy_or_does_not_exist_is_refused_before_the_model_loads(tmp_path, capsys):
    proc = eval_in_process(["--model_name_or_path", str(tmp_path), "--reward_funcs", "ppl"], capsys)
    assert proc.returncode != 0 and "--reward_funcs ppl" in proc.stderr
    proc = eval_in_process(["--model_name_or_path", str(tmp_path), "--reward_funcs", "no_such_reward"], capsys)
    assert proc.returncode != 0 and "unknown reward 'no_such_reward'" in proc.stderr
