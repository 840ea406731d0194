"""A launch after a killed comm-op build runs instead of waiting for ever on the lock it left (rl/engine/dist.py)."""
import os
import select
import signal
import subprocess
import sys

import pytest

from rl.engine.dist import build_lock, remove_stale_baton
from rl.engine.dist import REPO_ROOT, own_extensions_dir
from tests.helpers import run_train

HOLD = ("import sys, time\n"
        "from rl.engine.dist import build_lock\n"
        "print('waiting', flush=True)\n"
        "with build_lock(sys.argv[1]):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(60)\n")


def _hold(lock_dir):
    """A process that takes the build lock and holds it; unbuffered, so that readline takes one line and select on
    its stdout sees exactly what has not been read yet."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, lock_dir], stdout=subprocess.PIPE, bufsize=0,
                            env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    # imported (DeepSpeed may print its accelerator line first), about to ask for the lock
    lines = [proc.stdout.readline().strip() for _ in range(1)]
    while lines[-1] != b"waiting" and lines[-1] and len(lines) < 20:
        lines.append(proc.stdout.readline().strip())
    assert lines[-1] == b"waiting", lines
    return proc


def test_the_build_lock_is_exclusive_and_released_when_its_holder_is_killed(tmp_path):
    holder = _hold(str(tmp_path))
    try:
        assert holder.stdout.readline().strip() == b"held"
        waiter = _hold(str(tmp_path))
        # a second holder would print "held" within milliseconds of "waiting"; a second is plenty
        assert select.select([waiter.stdout], [], [], 1.0)[0] == []
        assert waiter.poll() is None  # still waiting for the lock
        holder.send_signal(signal.SIGKILL)  # killed mid-build: the kernel drops its flock
        assert waiter.stdout.readline().strip() == b"held"
        waiter.kill()
        waiter.wait()
    finally:
        holder.kill()
        holder.wait()


def test_only_the_comm_ops_torch_lock_is_removed(tmp_path):
    (tmp_path / "deepspeed_shm_comm").mkdir()
    (tmp_path / "deepspeed_shm_comm" / "lock").write_text("")
    (tmp_path / "deepspeed_shm_comm" / "build.ninja").write_text("")
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "lock").write_text("")  # another op, built outside the flock: maybe a live build
    with build_lock(str(tmp_path)):
        removed = remove_stale_baton(str(tmp_path), "deepspeed_shm_comm")
        assert removed == [str(tmp_path / "deepspeed_shm_comm" / "lock")]
    assert sorted(p.name for p in (tmp_path / "deepspeed_shm_comm").iterdir()) == ["build.ninja"]
    assert (tmp_path / "cpu_adam" / "lock").exists()


@pytest.mark.slow
@pytest.mark.serial  # the planted lock is in the checkout's own build folder: another worker's launch would remove it
def test_a_launch_after_a_killed_build_does_not_wait_on_its_lock(tiny_model_dir, tmp_path):
    # The lock a process killed inside torch's build section leaves (torch/utils/file_baton.py): before the fix a
    # launch waited on it for ever, silently, after "Setting accelerator to CPU".
    extensions_dir = own_extensions_dir()  # credo's own folder, where a stale lock may be removed
    build_dir = os.path.join(extensions_dir, "deepspeed_shm_comm")
    stale = os.path.join(build_dir, "lock")
    # Planted inside the flock, as a killed build leaves it. Planted outside it, a launch from this checkout that is
    # running now (another session's) can be between its stale-lock check and torch's own lock, and then waits on
    # this file, holding the flock, until the finally below: this test's launch waited 300 s on it so, once.
    with build_lock(extensions_dir):
        os.makedirs(build_dir, exist_ok=True)
        open(stale, "w").close()
    data = tmp_path / "train.jsonl"
    data.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "2+2"\n')  # stops right after init: quick
    try:
        proc = run_train(["--model_name_or_path", tiny_model_dir, "--env", "math", "--data_path", str(data),
                          "--output_dir", str(tmp_path / "out")], launcher=False, timeout=300)
    finally:
        if os.path.exists(stale):
            os.remove(stale)  # never leave the planted lock for the rest of the suite
            raise AssertionError("the stale lock was not removed")
    assert f"{data}:2: malformed JSON" in proc.stderr, proc.stderr[-2000:]
    assert "build lock left by a process killed" in proc.stderr
