"""A run stops when told (issue #65 item 6): the first SIGINT / SIGTERM finishes the step and says what will and will
not be saved; a second one ends a bare `python train.py` at once, so `timeout N python train.py` bounds it."""
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from rl.trainer import Trainer
from tests.helpers import REPO_ROOT


def _announce(step, steps, capsys, strategy="steps"):
    output = SimpleNamespace(checkpoints=strategy == "steps", final_export=strategy != "no", output_dir="out/run")
    trainer = SimpleNamespace(step=step, steps=steps, rank=0, stop_signal=None, output=output)
    Trainer._on_signal(trainer, signal.SIGTERM, None)
    return trainer.stop_signal, capsys.readouterr().out


def test_a_signal_during_a_step_announces_that_step(capsys):
    name, out = _announce(1, 3, capsys)
    assert name == "SIGTERM" and "finishing step 2, then saving a checkpoint" in out
    assert "a second signal ends the run at once, losing step 2" in out  # a bare process (pytest's child)


def test_a_signal_after_the_last_step_announces_no_step_that_does_not_exist(capsys):
    _, out = _announce(3, 3, capsys)
    assert "step 4" not in out and "last step (3) is done" in out


@pytest.mark.parametrize("strategy, said", [("no", "nothing is saved (--save_strategy no)"),
                                            ("final", "--save_strategy final writes final/ only after the last step")])
def test_the_announcement_never_promises_a_save_the_strategy_does_not_make(strategy, said, capsys):
    _, out = _announce(1, 3, capsys, strategy)
    assert said in out and "saving a checkpoint" not in out


@pytest.mark.slow
def test_a_second_signal_ends_a_bare_run_while_its_step_runs(tiny_model_dir, tmp_path):
    """The step hangs in a reward call (600 s timeout): before, a second SIGINT was ignored until the step ended."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT)
    log_path = tmp_path / "train.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "train.py", "--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path / "run"),
             "--max_steps", "1", "--per_device_generation_batch_size", "2", "--num_generations", "2",
             "--max_answer_seq_len", "8", "--save_strategy", "no", "--dtype", "fp32",
             "--reward_funcs", "correctness,tests.fixture_rewards:hangs", "--reward_timeout", "600"],
            cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 300
        while "train:" not in log_path.read_text() and proc.poll() is None and time.time() < deadline:
            time.sleep(1)  # tqdm's bar: the loop, and step 1, have begun
        assert "train:" in log_path.read_text(), log_path.read_text()[-3000:]
        time.sleep(5)  # inside the step's reward call
        proc.send_signal(signal.SIGINT)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)  # before: the step waited out the 600 s reward call
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = log_path.read_text()
    assert proc.returncode == -signal.SIGINT, (proc.returncode, out[-3000:])
    assert "nothing is saved (--save_strategy no)" in out and "SIGINT again: ending now" in out
