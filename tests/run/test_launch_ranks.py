"""Which processes a graceful stop signals: the ranks of a deepspeed launch, not their helpers (rl/run/launch_ranks.py)."""
import os
import subprocess
import sys
import time

import psutil

from rl.run.launch_ranks import LAUNCH_MODULE, deepspeed_ranks

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
