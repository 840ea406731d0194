"""scripts/launch.py: the deepspeed launcher with a usable port and a terminal Ctrl-C that waits for the save."""
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from rl.run.checkpoint import latest_checkpoint
from rl.log.loggers import read_metrics
import scripts.launch
from rl.run.launch_ranks import LAUNCH_MODULE
from scripts.launch import with_master_port
from tests.helpers import REPO_ROOT
from tests.train.test_train_deepspeed import TINY_RUN

LAUNCH = [sys.executable, os.path.join(REPO_ROOT, "scripts", "launch.py")]


@pytest.fixture
def busy_port():
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        yield s.getsockname()[1]


def test_a_busy_master_port_is_refused_at_once_naming_the_flag(busy_port):
    start = time.time()
    proc = subprocess.run([*LAUNCH, "--num_gpus", "1", "--master_port", str(busy_port), "train.py"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert f"--master_port {busy_port} is in use" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.time() - start < 10  # not the rendezvous' 37 s timeout


def test_without_a_port_a_free_one_is_chosen(monkeypatch):
    # The default port held here, under the default's name: 29500 itself may be another run's, which can let it go
    # between a failed bind here and with_master_port's check (it did, on a shared machine), and then it is chosen.
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        busy = s.getsockname()[1]
        monkeypatch.setattr(scripts.launch, "DEFAULT_PORT", busy)
        argv = with_master_port(["--num_gpus", "1", "train.py"])
    assert argv[0] == "--master_port" and argv[2:] == ["--num_gpus", "1", "train.py"]
    assert int(argv[1]) != busy


@pytest.mark.slow
def test_a_terminal_ctrl_c_returns_only_after_the_ranks_saved(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false")
    # A session of its own stands for the terminal's foreground process group: killpg reaches everything in it,
    # as a terminal's Ctrl-C does.
    proc = subprocess.Popen([*LAUNCH, "--num_gpus", "2", "train.py", "--model_name_or_path", tiny_model_dir,
                             "--output_dir", out, *TINY_RUN, "--max_steps", "500", "--no_final_export"],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    metrics = os.path.join(out, "metrics.jsonl")
    deadline = time.time() + 240
    while time.time() < deadline and not (os.path.exists(metrics) and read_metrics(metrics)):
        time.sleep(0.5)
    ranks = [p for p in psutil.Process(proc.pid).children(recursive=True) if "--local_rank" in " ".join(p.cmdline())]
    assert len(ranks) == 2
    os.killpg(proc.pid, signal.SIGINT)
    output, _ = proc.communicate(timeout=180)
    # The moment the "shell" gets control back, the save is complete and no rank is left running.
    steps = [r["step"] for r in read_metrics(metrics)]
    assert latest_checkpoint(os.path.join(out, "checkpoints")) == f"step_{steps[-1]}", output[-3000:]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks)
    assert proc.returncode == 128 + signal.SIGINT, output[-3000:]  # interrupted, so a calling script stops
    assert "checkpoint saved" in output and "KeyboardInterrupt" not in output


@pytest.mark.slow
def test_a_killed_launch_process_is_a_failed_launch_naming_the_rank_which_saves_and_stops(tiny_model_dir, tmp_path):
    """SIGKILL to DeepSpeed's per-node launch process: `deepspeed` itself exits 0 (its runner drops negative exit
    codes) and the rank used to train on, orphaned. launch.py names the rank, stops it with a save, and fails."""
    out = str(tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen([*LAUNCH, "--num_gpus", "1", "train.py", "--model_name_or_path", tiny_model_dir,
                             "--output_dir", out, *TINY_RUN, "--max_steps", "500", "--no_final_export"],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = os.path.join(out, "metrics.jsonl")
    deadline = time.time() + 240
    while time.time() < deadline and not (os.path.exists(metrics) and read_metrics(metrics)):
        time.sleep(0.5)
    tree = psutil.Process(proc.pid).children(recursive=True)
    launch = [p for p in tree if LAUNCH_MODULE in " ".join(p.cmdline())]
    assert len(launch) == 1, tree
    rank = launch[0].children()[0]
    launch[0].kill()
    output, _ = proc.communicate(timeout=180)
    assert proc.returncode == 1, output[-3000:]  # a lost launch is not a finished run
    assert f"rank 0 (pid {rank.pid}) kept running" in output, output[-3000:]
    assert not rank.is_running(), "the orphaned rank trains on"
    steps = [r["step"] for r in read_metrics(metrics)]
    assert latest_checkpoint(os.path.join(out, "checkpoints")) == f"step_{steps[-1]}", output[-3000:]
    assert steps[-1] < 500 and "checkpoint saved" in output
