"""--appworld_* flags reach AppWorld envs as constructor and dataset arguments; nothing goes through os.environ."""
import os

import pytest

from envs.appworld.env import AppWorldEnv
from rl.config import parse_args
from rl.rollout.data import DataSettings, training_rows
from rl.scoring import Scorer, ScoringSettings

VARIABLES = ("BACKEND", "URL", "SCORE", "EVAL_SPLIT", "TASKS_DIR", "CELL_TIMEOUT")


@pytest.fixture
def clean_environ(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(f"CREDO_APPWORLD_{name}", raising=False)
    return monkeypatch


def _args(model, *argv):
    return parse_args(["--env", "appworld", "--model_name_or_path", model, "--output_dir", "o", *argv])


def test_parsing_appworld_flags_leaves_os_environ_alone(tiny_model_dir, clean_environ):
    before = dict(os.environ)
    _args(tiny_model_dir, "--appworld_backend", "lite", "--appworld_score", "success", "--appworld_url", "http://x:1")
    assert dict(os.environ) == before  # a rank's settings are its flags, not what an earlier parse left behind


def test_the_trainer_s_envs_get_the_flags_as_arguments(tiny_model_dir, clean_environ):
    args = _args(tiny_model_dir, "--appworld_score", "success", "--appworld_url", "http://127.0.0.1:9")
    env = Scorer(ScoringSettings.from_args(args)).new_env()
    assert (env.backend, env.urls, env.score_mode) == ("lite", "http://127.0.0.1:9", "success")
    # unset flags leave the constructor's defaults
    plain = Scorer(ScoringSettings.from_args(_args(tiny_model_dir))).new_env()
    assert (plain.backend, plain.urls, plain.score_mode) == ("lite", "http://127.0.0.1:8000", "fraction")


def test_remote_training_rows_come_from_the_tasks_dir_flag(tiny_model_dir, clean_environ, tmp_path):
    (tmp_path / "train.txt").write_text("task_a_1\ntask_b_2\n")
    args = _args(tiny_model_dir, "--appworld_backend", "remote", "--appworld_tasks_dir", str(tmp_path),
                 "--num_train_samples", "8")
    assert [row["id"] for row in training_rows(DataSettings.from_args(args))] == ["task_a_1", "task_b_2"]
    assert AppWorldEnv.dataset("train", 8, 0, backend="remote") is None  # no task list: --data_path is needed


def test_eval_split_flag_picks_the_split_eval_means(clean_environ):
    lite_test = AppWorldEnv.dataset("eval", 100, 0)
    lite_dev = AppWorldEnv.dataset("eval", 100, 0, eval_split="dev")
    assert lite_test and lite_dev and {r["id"] for r in lite_test}.isdisjoint(r["id"] for r in lite_dev)


def test_credo_appworld_variables_are_the_flags_defaults(tiny_model_dir, clean_environ):
    clean_environ.setenv("CREDO_APPWORLD_SCORE", "success")
    clean_environ.setenv("CREDO_APPWORLD_URL", "http://127.0.0.1:7")
    args = _args(tiny_model_dir)
    assert (args.appworld_score, args.appworld_url) == ("success", "http://127.0.0.1:7")  # recorded in the config
    env = Scorer(ScoringSettings.from_args(args)).new_env()
    assert (env.score_mode, env.urls) == ("success", "http://127.0.0.1:7")
    assert _args(tiny_model_dir, "--appworld_score", "fraction").appworld_score == "fraction"  # the flag wins


def test_a_bad_value_from_a_variable_is_refused_naming_it(tiny_model_dir, clean_environ):
    clean_environ.setenv("CREDO_APPWORLD_BACKEND", "cloud")
    with pytest.raises(SystemExit) as exc:
        _args(tiny_model_dir)
    assert "--appworld_backend" in str(exc.value) and "CREDO_APPWORLD_BACKEND" in str(exc.value)


@pytest.mark.parametrize("value", ["five", "0", "-1"])
def test_a_bad_cell_timeout_is_refused_at_parsing_naming_the_variable(tiny_model_dir, clean_environ, value):
    clean_environ.setenv("CREDO_APPWORLD_CELL_TIMEOUT", value)
    with pytest.raises(SystemExit) as exc:
        _args(tiny_model_dir)
    assert "CREDO_APPWORLD_CELL_TIMEOUT" in str(exc.value) and repr(value) in str(exc.value)
    clean_environ.setenv("CREDO_APPWORLD_CELL_TIMEOUT", "2.5")
    assert _args(tiny_model_dir).env == "appworld"  # a positive number of seconds is accepted
