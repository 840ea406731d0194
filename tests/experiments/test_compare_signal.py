"""A SIGTERM sent to compare.py alone (`kill PID`) stops its train.py after a checkpoint instead of orphaning it."""
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from experiments.compare import interrupted_state
from tests.helpers import REPO_ROOT
from tests.experiments.test_compare import _leftovers
from tests.train.test_train_deepspeed import TINY_RUN


def _logged_a_step(cache) -> bool:
    for key in os.listdir(cache) if cache.exists() else []:
        metrics = cache / key / "train" / "metrics.jsonl"
        if metrics.exists() and metrics.read_text().strip():
            return True
    return False


@pytest.mark.slow
def test_a_sigterm_to_compare_alone_saves_and_stops_its_training_run(tiny_model_dir, tmp_path):
    cache = tmp_path / "cache"
    max_steps = 500  # far more than the test waits for: the run is stopped, not finished
    argv = [sys.executable, "experiments/compare.py", "--name", "sig", "--seeds", "1",
            "--method", "grpo=--algo grpo", "--method", "dr_grpo=--algo grpo --scale_rewards none",
            "--train_args", shlex.join(["--model_name_or_path", tiny_model_dir, "--max_steps", str(max_steps),
                                        "--dtype", "fp32", *TINY_RUN]),
            "--no_eval", "--metric", "last:reward/mean", "--cache_dir", str(cache), "--results", str(tmp_path / "r")]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false")
    sweep = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)  # its own group, so that the signal below reaches it alone
    try:
        deadline = time.time() + 600
        while not _logged_a_step(cache) and sweep.poll() is None and time.time() < deadline:
            time.sleep(0.5)  # train.py installs its stop handler before its first step
        assert sweep.poll() is None, sweep.communicate()[1][-3000:]
        sweep.send_signal(signal.SIGTERM)  # compare.py's pid only, as `kill PID` does
        _, stderr = sweep.communicate(timeout=600)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
        time.sleep(1)
        stray = _leftovers(cache)
        for proc in stray:
            proc.kill()
    assert not stray, [p.info["cmdline"] for p in stray]
    assert sweep.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    assert "stopped by SIGTERM; run the same command again to continue it" in stderr
    (run_dir,) = [cache / key for key in os.listdir(cache) if (cache / key).is_dir()]
    assert not (run_dir / "run.json").exists()  # not a finished run
    saved = interrupted_state(str(run_dir), max_steps)  # the step train.py saved on the signal: resumable
    assert isinstance(saved, int) and 1 <= saved < max_steps, saved
