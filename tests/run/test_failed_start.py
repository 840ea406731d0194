"""A run that failed before its first step does not block the fixed command (issue #65 item 2): its folder is reused
(saying so), and a failed start cleans up after itself (rl/run/start.py's discard_failed_start, around train.py's
run)."""
import os

import pytest

from rl.config import parse_args, parser_defaults
from rl.log.loggers import close_training_log
from rl.run.saved_config import RunMismatch, read_run_config, release_output_lock
from rl.run.start import StartSettings, discard_failed_start, start_run, trained_step_evidence

ENV = ["--env", "tests.fixture_envs:DigitFractionEnv"]


@pytest.fixture(autouse=True)
def _no_log_left_open():
    yield
    close_training_log()  # train.py closes the training.log a run inside discard_failed_start opens


def flags(tiny_model_dir, out, *extra):
    return parse_args(["--model_name_or_path", tiny_model_dir, *ENV, "--output_dir", str(out), *extra])


def _failed_start(args):
    with pytest.raises(RuntimeError, match="model failed to load"):
        with discard_failed_start():
            start_run(StartSettings.from_args(args), 5, parser_defaults())
            raise RuntimeError("model failed to load")


def test_a_folder_holding_only_a_failed_start_s_config_is_reused_by_a_corrected_command(tiny_model_dir, tmp_path,
                                                                                         capsys):
    start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path)), 5, parser_defaults())  # stopped before its first step (no cleanup)
    release_output_lock(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".trainer.lock", "config.json"]
    start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--top_p", "0.9")), 5, parser_defaults())  # the fixed flag
    out = capsys.readouterr().out
    assert f"reusing {tmp_path}" in out and "stopped before its first step" in out
    assert read_run_config(str(tmp_path))["flags"]["top_p"] == 0.9
    release_output_lock(str(tmp_path))


def test_a_failed_start_removes_the_folder_it_created(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    _failed_start(flags(tiny_model_dir, out))
    assert not out.exists()
    assert f"removed {out}" in capsys.readouterr().err


def test_a_failed_start_in_an_existing_folder_removes_only_its_claim(tiny_model_dir, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    _failed_start(flags(tiny_model_dir, tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "training.log"]  # the log keeps why it stopped
    start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--top_p", "0.9")), 5, parser_defaults())  # refused before the fix
    release_output_lock(str(tmp_path))


def test_a_run_with_a_trained_step_is_never_cleaned_up(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        with discard_failed_start():
            start_run(StartSettings.from_args(flags(tiny_model_dir, out)), 5, parser_defaults())
            (out / "metrics.jsonl").write_text('{"step": 1}\n')
            raise RuntimeError("crash at step 2")
    assert trained_step_evidence(str(out)) == "metrics.jsonl has trained steps"
    assert read_run_config(str(out)) is not None
    release_output_lock(str(out))


def test_a_refused_start_touches_nothing(tiny_model_dir, tmp_path):
    start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path)), 5, parser_defaults())
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    release_output_lock(str(tmp_path))
    with pytest.raises(RunMismatch):
        with discard_failed_start():
            start_run(StartSettings.from_args(flags(tiny_model_dir, tmp_path, "--top_p", "0.9")), 5, parser_defaults())
    assert read_run_config(str(tmp_path))["flags"]["top_p"] != 0.9
