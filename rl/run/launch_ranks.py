"""The training ranks of a single-node `deepspeed` launch, found in its process tree.

Both places that stop a run gracefully signal exactly these processes: scripts/launch.py (a terminal's Ctrl-C) and
benchmarks/run_child.py (a SIGTERM to compare.py). A rank is a direct child of DeepSpeed's `launch.py`
(`python -m deepspeed.launcher.launch`); matching `--local_rank` in command lines instead would also catch a rank's
forked helpers (they inherit its command line until they exec) and misses ranks started with `--no_local_rank`.
"""
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
