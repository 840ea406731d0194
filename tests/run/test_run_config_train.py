"""Two runs in one output folder, through train.py itself: a finished run stays finished, another experiment is
refused (and mixes nothing), --resume force and a raised --max_steps continue, a bad `latest` falls back."""
import os
import shutil

import pytest

from rl.log.loggers import read_metrics
from rl.run.saved_config import read_run_config
from tests.helpers import run_train_in_process
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok

pytestmark = pytest.mark.slow
RUN = [*TINY_RUN, "--no_final_export", "--save_steps", "1"]


def train(model, out, *extra):
    # one rank in the test process: the behaviour under test is the start decision, not the launcher
    return run_train_in_process(["--model_name_or_path", model, "--output_dir", out, *RUN, *extra])


def steps_logged(out):
    return [r["step"] for r in read_metrics(os.path.join(out, "metrics.jsonl"))]


@pytest.fixture(scope="module")
def one_step_run(tiny_model_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("one_step_run") / "run")
    assert_ok(train(tiny_model_dir, out, "--max_steps", "1"))
    return out


@pytest.fixture
def copy_of_run(one_step_run, tmp_path):
    out = str(tmp_path / "run")
    shutil.copytree(one_step_run, out)
    return out


def test_a_run_records_its_config_with_flags_versions_and_commit(one_step_run):
    config = read_run_config(one_step_run)
    assert config["flags"]["max_steps"] == 1 and config["flags"]["actor_learning_rate"] == 1e-2
    assert config["versions"]["deepspeed"] and config["git_commit"] and config["world_size"] == 1


def test_rerunning_a_finished_run_says_so_and_exits_zero_without_training(copy_of_run, tiny_model_dir):
    checkpoint = os.path.join(copy_of_run, "checkpoints", "step_1", "manifest.json")
    before = os.stat(checkpoint).st_mtime_ns
    again = train(tiny_model_dir, copy_of_run, "--max_steps", "1")
    assert_ok(again)
    assert "is finished" in again.stdout and "Raise --max_steps" in again.stdout
    assert "resumed from" not in again.stdout
    assert steps_logged(copy_of_run) == [1]
    assert os.stat(checkpoint).st_mtime_ns == before


def test_another_experiment_in_the_same_folder_is_refused_and_mixes_nothing(copy_of_run, tiny_model_dir):
    other = train(tiny_model_dir, copy_of_run, "--max_steps", "2", "--actor_learning_rate", "1e-3")
    assert other.returncode != 0
    text = other.stdout + other.stderr
    assert "--actor_learning_rate 0.01 -> 0.001" in text and "--resume force" in text
    assert steps_logged(copy_of_run) == [1]
    assert read_run_config(copy_of_run)["flags"]["actor_learning_rate"] == 1e-2

    forced = train(tiny_model_dir, copy_of_run, "--max_steps", "2", "--actor_learning_rate", "1e-3",
                   "--resume", "force")
    assert_ok(forced)
    assert "at step 1" in forced.stdout and "--actor_learning_rate 0.01 -> 0.001" in forced.stderr
    assert steps_logged(copy_of_run) == [1, 2]
    assert "learning rate and weight decay stay the checkpoint's" in forced.stderr
    assert read_metrics(os.path.join(copy_of_run, "metrics.jsonl"))[-1]["actor/lr"] == pytest.approx(1e-2)


def test_raising_max_steps_continues_a_finished_run(copy_of_run, tiny_model_dir):
    more = train(tiny_model_dir, copy_of_run, "--max_steps", "2")
    assert_ok(more)
    assert "resumed from" in more.stdout and "at step 1" in more.stdout
    assert steps_logged(copy_of_run) == [1, 2]


def test_latest_naming_a_missing_step_resumes_the_newest_complete_one_without_overwriting(copy_of_run,
                                                                                          tiny_model_dir):
    root = os.path.join(copy_of_run, "checkpoints")
    with open(os.path.join(root, "latest"), "w") as f:
        f.write("step_7\n")  # e.g. a copy that lost its newest folder
    resumed = train(tiny_model_dir, copy_of_run, "--max_steps", "2")
    assert_ok(resumed)
    assert "latest names step_7, which does not exist" in resumed.stderr
    assert f"resumed from {os.path.join(root, 'step_1')} at step 1" in resumed.stdout
    assert steps_logged(copy_of_run) == [1, 2]
