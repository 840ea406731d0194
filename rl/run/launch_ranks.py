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


# --- a signal to a rank: what the first one saves, and a second one in a bare `python train.py` ---
# The first SIGINT / SIGTERM finishes the step, saves what --save_strategy keeps and exits (rl/trainer.py). A second
# one ends a bare `python train.py` at once, as scripts/launch.py's second Ctrl-C does, so `timeout N python train.py`
# bounds a run. Under a launcher the launcher owns the second signal: deepspeed's launch.py answers the terminal's
# SIGINT by sending each rank a SIGTERM of its own (a second signal that is no second request) and kills the ranks
# 30 s later itself; scripts/launch.py kills them on a second Ctrl-C.

def launched_rank() -> bool:
    """Whether this process is a rank started by a launcher (deepspeed's launch.py, torchrun, mpirun), not a bare
    `python train.py`."""
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        return True
    try:
        parent = " ".join(psutil.Process(os.getppid()).cmdline())
    except psutil.Error:
        return False
    return any(name in parent for name in (LAUNCH_MODULE, "torch.distributed.run", "torchrun"))


def stop_announcement(signal_name: str, step: int, steps: int, checkpoints: bool, final_export: bool,
                      output_dir: str, bare: bool) -> str:
    """What the first signal will do: finish which step, what is saved and what is not, and what a second one does."""
    if step >= steps:  # after the last step there is no step to finish: only the final save / export
        saving = "finishing the final save" if checkpoints or final_export else "nothing is left to save"
        return f"\n{signal_name} received: the last step ({step}) is done; {saving}, then exiting"
    if checkpoints:
        saved = f"then saving a checkpoint to continue from (--output_dir {output_dir})"
    elif final_export:
        saved = ("then exiting without saving: --save_strategy final writes final/ only after the last step, so "
                 "nothing is saved")
    else:
        saved = "then exiting; nothing is saved (--save_strategy no)"
    again = (f"; a second signal ends the run at once, losing step {step + 1}" if bare else "")
    return f"\n{signal_name} received: finishing step {step + 1}, {saved} (metrics.jsonl keeps the steps done){again}"


def end_at_once(signum: int, step: int, checkpoints: bool):
    """A second signal in a bare run: say what is lost, then die of the signal as a process without a handler does
    (exit status 128 + signum to a shell); the reward workers notice their parent is gone and exit too."""
    kept = "the last checkpoint stays" if checkpoints else "nothing was saved"
    print(f"\n{signal.Signals(signum).name} again: ending now; step {step + 1} is lost and {kept}", flush=True)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
