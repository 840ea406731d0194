"""Every launcher writes what the README's table promises (issue #65 item 8): TensorBoard events by default, and
OUTPUT_DIR/training.log from train.py itself, not only from scripts/train.sh (rl/log/loggers.py)."""
import os
import subprocess
import sys
import time

import pytest

from rl.log.loggers import close_training_log, start_training_log
from tests.helpers import REPO_ROOT


def test_the_process_s_stdout_and_stderr_reach_training_log_and_get_their_descriptors_back(tmp_path):
    before = os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")
    assert start_training_log(str(tmp_path))
    try:
        os.write(1, b"a line on stdout\n")
        os.write(2, b"a line on stderr\n")
        print("from python", flush=True)
    finally:
        close_training_log(SystemExit("train.py: stopped: the reason"))
    assert (os.readlink("/proc/self/fd/1"), os.readlink("/proc/self/fd/2")) == before
    text = (tmp_path / "training.log").read_text()
    for line in ("a line on stdout", "a line on stderr", "train.py: stopped: the reason"):
        assert line in text


def test_a_log_a_launcher_script_writes_already_is_not_written_twice(tmp_path):
    log = tmp_path / "training.log"
    log.write_text("")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'a'); time.sleep(60)",
                               str(log)])  # as scripts/train.sh's tee holds it
    try:
        time.sleep(1)
        assert not start_training_log(str(tmp_path))
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_a_bare_python_train_py_writes_tensorboard_and_training_log(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "train.py", "--model_name_or_path", tiny_model_dir, "--output_dir", str(out),
                           "--max_steps", "1", "--per_device_generation_batch_size", "2", "--num_generations", "2",
                           "--max_answer_seq_len", "8", "--save_strategy", "no", "--dtype", "fp32"],
                          cwd=REPO_ROOT, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(out / "tensorboard"))
    log = (out / "training.log").read_text()
    assert "step 1 | reward" in log and f"done: 1 steps; outputs in {out}" in log
    assert "step 1 | reward" in proc.stdout  # the console keeps its own output, stdout apart from stderr
