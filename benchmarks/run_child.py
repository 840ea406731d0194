"""compare.py's child processes (train.py under the `deepspeed` launcher, then eval.py), main_job_ab.py's
(scripts/train.sh), and a SIGTERM that stops them.

A SIGTERM sent to compare.py alone (`kill PID`, or a scheduler that signals only the job's main process) used to kill
compare.py at once and leave its train.py running, unseen, on the machine's cores or GPUs. Now compare.py forwards it
to the training ranks, which finish their step, save and exit (rl/trainer.py `Trainer.fit`); compare.py waits for the
run to stop, writes no run.json and exits 128 + 15, and the same command continues from that checkpoint.

Why the ranks and not DeepSpeed's launcher: single-node `deepspeed` (runner.py) installs no signal handler, so it
would die and orphan its launch.py, and launch.py SIGKILLs ranks still alive 30 s after a signal, which can be
mid-save. A repeated signal is harmless (train.py only sets a flag), so a scheduler that also signals every process
itself stops nothing twice. Before the ranks exist (the launcher is starting) there is nothing to save: the whole
tree is signalled. A terminal's Ctrl-C is unchanged: SIGINT reaches the whole foreground group as before.
"""
import contextlib
import signal
import subprocess

import psutil

from rl.run.launch_ranks import deepspeed_ranks


class Interrupted(Exception):
    """The child was stopped because compare.py received `signum`."""

    def __init__(self, signum: int, what: str):
        super().__init__(f"{what} stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _signal_all(processes, signum: int):
    for proc in processes:
        try:
            proc.send_signal(signum)
        except psutil.NoSuchProcess:
            pass


def call(cmd, cwd: str, log_path, what: str, append: bool = False, env: dict = None) -> int:
    """Run `cmd` with its output in log_path (None: this process's stdout and stderr, as the child writes its own log);
    return its exit code. A SIGTERM to this process meanwhile is forwarded (module docstring); once the child has
    exited, `Interrupted` is raised whatever its exit code was."""
    received = []
    with (open(log_path, "a" if append else "w") if log_path else contextlib.nullcontext()) as log:
        child = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT if log else None)

        def forward(signum, frame):
            received.append(signum)
            ranks = deepspeed_ranks(child.pid)
            if ranks:
                _signal_all(ranks, signum)
                return
            try:
                root = psutil.Process(child.pid)
                _signal_all([*root.children(recursive=True), root], signum)
            except psutil.NoSuchProcess:
                pass

        previous = signal.signal(signal.SIGTERM, forward)
        try:
            code = child.wait()  # resumes by itself after the handler runs (PEP 475)
        finally:
            signal.signal(signal.SIGTERM, previous)
    if received:
        raise Interrupted(received[0], what)
    return code
