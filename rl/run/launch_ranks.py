"""The training ranks of a single-node `deepspeed` launch, found in its process tree.

Both places that stop a run gracefully signal exactly these processes: scripts/launch.py (a terminal's Ctrl-C) and
benchmarks/run_child.py (a SIGTERM to compare.py). A rank is a direct child of DeepSpeed's `launch.py`
(`python -m deepspeed.launcher.launch`); matching `--local_rank` in command lines instead would also catch a rank's
forked helpers (they inherit its command line until they exec) and misses ranks started with `--no_local_rank`.

A launch process that dies of a signal (SIGKILL, the OOM killer) loses its ranks' fate twice over: DeepSpeed's
runner passes on only a positive exit code (`if result.returncode > 0: sys.exit(...)` in deepspeed/launcher/runner.py,
0.19.8), and a process killed by a signal has a negative one, so `deepspeed` exits 0; and the ranks, re-parented,
train on. RankWatch lets scripts/launch.py see both; stop_with_launcher lets a rank stop by itself under any launcher.
"""
import ctypes
import os
import signal

import psutil

LAUNCH_MODULE = "deepspeed.launcher.launch"


def deepspeed_ranks(root_pid: int) -> list:
    """The rank processes (psutil.Process) below root_pid; [] when root_pid has exited or no rank has started yet."""
    try:
        tree = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    ranks = []
    for proc in tree:
        try:
            if LAUNCH_MODULE in " ".join(proc.cmdline()):
                ranks.extend(proc.children())
        except psutil.Error:  # it exited while we looked
            continue
    return ranks


def rank_name(proc: psutil.Process) -> str:
    """"rank N" from the RANK variable DeepSpeed's launch.py gives each rank (kept under --no_local_rank)."""
    try:
        return f"rank {proc.environ()['RANK']}"
    except (psutil.Error, KeyError):
        return "a rank"


class RankWatch:
    """The ranks seen below a launch so far (poll() them while it runs), remembered after their launch process is
    gone: psutil.Process keeps each one's start time, so a reused pid is never mistaken for a rank."""

    def __init__(self, root_pid: int):
        self.root_pid, self.seen = root_pid, {}

    def poll(self):
        for proc in deepspeed_ranks(self.root_pid):
            if proc.pid not in self.seen:
                self.seen[proc.pid] = (proc, rank_name(proc))

    def still_running(self) -> list:
        """[(process, "rank N")] of the seen ranks that have not exited (a zombie has)."""
        return self._select(lambda proc, zombie: not zombie)

    def outlived_launch(self) -> list:
        """[(process, "rank N")] of the seen ranks that outlived their launch process: still running, or exited and
        adopted by this process (a zombie whose parent is now us, after become_subreaper). A launch process that
        ends normally has reaped its ranks first, so neither kind is left after a finished run. The adopted ones
        matter because a rank armed by stop_with_launcher stops by itself (saves, exits 0), often before the
        launcher's own exit is seen: still_running() alone then missed the lost launch."""
        return self._select(lambda proc, zombie: not zombie or proc.ppid() == os.getpid())

    def _select(self, keep) -> list:
        chosen = []
        for proc, name in self.seen.values():
            try:
                if proc.is_running() and keep(proc, proc.status() == psutil.STATUS_ZOMBIE):
                    chosen.append((proc, name))
            except psutil.NoSuchProcess:  # it was reaped while we looked
                pass
        return chosen


def _prctl(option: int, value: int) -> bool:
    """Linux prctl(2); False where there is none (the callers then do without)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Orphaned descendants (a rank whose launch process died) are re-parented to this process instead of PID 1,
    so it can wait for them and read their exit status (PR_SET_CHILD_SUBREAPER)."""
    return _prctl(36, 1)


def stop_with_launcher(sig: int = signal.SIGTERM) -> bool:
    """In a rank: have the kernel send `sig` when DeepSpeed's launch process (the parent) dies however it dies
    (PR_SET_PDEATHSIG), so a rank whose launcher was SIGKILLed stops, after saving its step (Trainer.fit treats
    SIGTERM as a graceful stop), instead of training on unseen under a `deepspeed` that exited 0. Only under
    deepspeed.launcher.launch; returns whether it was armed."""
    parent = os.getppid()
    try:
        if LAUNCH_MODULE not in " ".join(psutil.Process(parent).cmdline()):
            return False
    except psutil.Error:
        return False
    if not _prctl(1, int(sig)):
        return False
    if os.getppid() != parent:  # the launcher died before the request took hold: nobody will send it
        os.kill(os.getpid(), sig)
    return True
