"""Which processes a graceful stop signals: the ranks of a deepspeed launch, not their helpers (rl/run/launch_ranks.py)."""
import os
import signal
import subprocess
import sys
import time

import psutil

from rl.run.launch_ranks import LAUNCH_MODULE, RankWatch, deepspeed_ranks, stop_with_launcher
from tests.helpers import REPO_ROOT

# A stand-in process tree with the shape of a real launch: runner -> `... deepspeed.launcher.launch` -> rank -> a
# forked helper that keeps the rank's command line (as multiprocessing's fork does). The launcher marker is an argv
# entry, which is all deepspeed_ranks reads.
RANK = ("import os, time\n"
        "if os.fork() == 0:\n"
        "    time.sleep(60)\n"
        "time.sleep(60)\n")
LAUNCH = ("import subprocess, sys, time\n"
          f"subprocess.Popen([sys.executable, '-c', {RANK!r}, '--local_rank=0'])\n"
          "time.sleep(60)\n")
RUNNER = ("import subprocess, sys, time\n"
          f"subprocess.Popen([sys.executable, '-c', {LAUNCH!r}, '{LAUNCH_MODULE}'])\n"
          "time.sleep(60)\n")


def test_the_ranks_are_the_launch_modules_children_and_not_their_forked_helpers():
    runner = subprocess.Popen([sys.executable, "-c", RUNNER], start_new_session=True)
    try:
        deadline = time.time() + 30
        while len(psutil.Process(runner.pid).children(recursive=True)) < 3 and time.time() < deadline:
            time.sleep(0.1)
        tree = psutil.Process(runner.pid).children(recursive=True)
        assert len(tree) == 3, tree
        ranks = deepspeed_ranks(runner.pid)
        assert len(ranks) == 1
        helper = ranks[0].children()
        assert len(helper) == 1 and "--local_rank=0" in helper[0].cmdline()  # a naive --local_rank match takes it too
    finally:
        os.killpg(runner.pid, 9)
        runner.wait()
    assert deepspeed_ranks(runner.pid) == []  # an exited launch has no ranks



# A rank that arms stop_with_launcher and, as Trainer.fit does, treats SIGTERM as "save and exit 0".
GUARDED_RANK = ("import signal, sys, time\n"
                "from rl.run.launch_ranks import stop_with_launcher\n"
                "signal.signal(signal.SIGTERM, lambda *a: (print('saved', flush=True), sys.exit(0)))\n"
                "print('armed', stop_with_launcher(), flush=True)\n"
                "time.sleep(60)\n")
GUARDED_LAUNCH = ("import os, subprocess, sys, time\n"
                  f"subprocess.Popen([sys.executable, '-c', {GUARDED_RANK!r}], env=dict(os.environ, RANK='3'))\n"
                  "time.sleep(60)\n")


def wait_for(predicate, within_s: float = 20.0) -> bool:
    deadline = time.time() + within_s
    while not predicate() and time.time() < deadline:
        time.sleep(0.05)
    return predicate()


def test_a_rank_whose_launch_process_is_killed_is_named_and_stops_by_itself(tmp_path):
    """SIGKILL to the launch process: RankWatch still names the rank it saw, and the rank, armed by
    stop_with_launcher, gets SIGTERM from the kernel and stops (it trained on unseen before: issue 51)."""
    log = tmp_path / "rank.log"
    with open(log, "w") as out:
        launch = subprocess.Popen([sys.executable, "-c", GUARDED_LAUNCH, LAUNCH_MODULE], stdout=out,
                                  env=dict(os.environ, PYTHONPATH=REPO_ROOT), start_new_session=True)
    try:
        watch = RankWatch(os.getpid())  # the launch stand-in is this process's child, as the runner's launch.py
        assert wait_for(lambda: "armed" in log.read_text()), log.read_text()
        watch.poll()
        assert log.read_text().split() == ["armed", "True"]
        assert [name for _, name in watch.still_running()] == ["rank 3"]
        launch.kill()
        launch.wait()
        assert wait_for(lambda: watch.still_running() == []), "the orphaned rank trains on"
        assert log.read_text().split() == ["armed", "True", "saved"]
    finally:
        try:
            os.killpg(launch.pid, signal.SIGKILL)  # the rank keeps the launch's process group
        except ProcessLookupError:
            pass


def test_a_rank_not_started_by_deepspeeds_launch_arms_nothing():
    assert stop_with_launcher() is False  # pytest's parent is no launch process
