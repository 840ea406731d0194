"""experiments/compare.py: an interrupted run continues from its latest checkpoint instead of starting over."""
import json
import os
import shutil

import pytest

from experiments import compare
from rl.log.loggers import read_metrics
from tests.helpers import REPO_ROOT, run_train_in_process
from tests.run.test_run_config import fake_checkpoint, flags
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok


def test_what_an_interrupted_attempt_left_decides_how_it_continues(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    assert compare.interrupted_state(str(run_dir), 4) is None  # nothing there: start over
    train = run_dir / "train"
    os.makedirs(train)
    assert compare.interrupted_state(str(run_dir), 4) is None  # killed before its first checkpoint
    fake_checkpoint(str(train), 2, flags(tiny_model_dir, train))
    assert compare.interrupted_state(str(run_dir), 4) == 2
    # a checkpoint at the last step without the final export (killed while exporting): train.py would call the run
    # finished and never export it, so it is started over
    assert compare.interrupted_state(str(run_dir), 2) is None
    os.makedirs(train / "final")
    assert compare.interrupted_state(str(run_dir), 4) == "trained"  # only eval.py is left


@pytest.mark.slow
def test_a_run_killed_after_a_checkpoint_continues_from_it(tiny_model_dir, tmp_path, monkeypatch):
    """That the continued run matches an uninterrupted one is train.py's own guarantee (tests/run/test_fault_tolerance.py);
    here: compare.py continues it (train.py refuses --resume auto under other method flags), once, and says so."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("PYTHONPATH", REPO_ROOT)
    argv = ["--model_name_or_path", tiny_model_dir, *TINY_RUN, "--max_steps", "3", "--save_steps", "1",
            "--dtype", "fp32", "--seed", "1", "--resume", "none"]
    config = compare.resolved_config([*argv, "--output_dir", str(tmp_path / "unused")], "test")
    # the run as a kill after its step-2 checkpoint leaves it: stopped there, without the final export (made by
    # train.py's main() in this process: the launcher is exercised by compare.py's continuation below)
    cut = tmp_path / "cut"
    stopped = run_train_in_process([*argv[:-2], "--output_dir", str(cut / "train"), "--enable_test_mode",
                                    "--test_stop_step", "2"])
    assert_ok(stopped)
    shutil.rmtree(cut / "train" / "final")
    (cut / "train.log").write_text(stopped.stdout)
    compare.execute_run(str(cut), argv, None, 1, {"method": "grpo", "seed": 1, "train_argv": argv, "config": config})

    assert json.loads((cut / "run.json").read_text())["resumed_from"] == 2
    log = (cut / "train.log").read_text()
    assert "done: 2 steps" in log and "resumed from" in log and "at step 2" in log  # the first attempt's log is kept
    assert [r["step"] for r in read_metrics(str(cut / "train" / "metrics.jsonl"))] == [1, 2, 3]
    assert os.path.isdir(cut / "train" / "final") and not os.path.exists(cut / "train" / "checkpoints")
