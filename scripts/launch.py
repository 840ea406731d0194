"""Run the `deepspeed` launcher the way a terminal user needs it: a free port, and a Ctrl-C that waits for the save.

    python scripts/launch.py --num_gpus 1 train.py --algo grpo ...     (any `deepspeed` arguments, unchanged)

Why a wrapper. A terminal's Ctrl-C sends SIGINT to the whole foreground process group. DeepSpeed's `runner.py`
then dies of KeyboardInterrupt at once (the shell returns while the ranks are still saving), and its `launch.py`
SIGTERMs the ranks and SIGKILLs any still alive 30 s later, which can be mid-save on a long step. Here the launcher
runs in its own session, so the terminal's signal reaches only this process; it is forwarded to the rank processes
alone (they finish the step, save and exit 0, see `Trainer.fit`), and this process returns only when the launcher
has exited. A second Ctrl-C kills the whole launch without saving.

A busy `--master_port` otherwise costs a 37 s rendezvous timeout and a 30-line `DistNetworkError`: a given port
is checked first and refused with a clear message; without one a free port is picked.

A lost rank is not a success. When DeepSpeed's per-node launch process dies of a signal (SIGKILL, the OOM killer),
`deepspeed` exits 0 (its runner passes on only positive exit codes) while the orphaned ranks train on, unless they
stop themselves (train.py's do: rl/run/launch_ranks.stop_with_launcher). Here the ranks are watched while they run
and this process adopts orphans (a child subreaper); a rank that outlived the launcher (still running, or already
stopped by itself and adopted here) is named, stopped as a Ctrl-C stops it (it finishes its step and saves), and the
exit code is 1.

One node of a multi-node launch (`--hostfile H --no_ssh --node_rank K`, as scripts/gpu/multi_node.sh starts each node
with NODE_RANK=K, and as a SLURM or Kubernetes job does) is a single-node launch for all of the above: its ranks are
local children, and a killed per-node launch process is a failed node (exit 1), not the 0 `deepspeed` reports.
Starting every node over ssh (`--hostfile` without `--no_ssh`, DeepSpeed's pdsh runner) has remote ranks: DeepSpeed's
own handler signals them, so there the signal goes to the launcher instead.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys

import psutil

from rl.run.launch_ranks import RankWatch, become_subreaper, deepspeed_ranks

DEFAULT_PORT = 29500  # DeepSpeed's own default, kept when it is free so that nothing changes for a quiet machine
POLL_S = 0.5          # how often the ranks are looked up while the launcher runs (a rank lives for minutes at least)
ORPHAN_STOP_S = 900   # an orphaned rank's time to finish its step and save before it is killed
LOST_RANK_EXIT = 1


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port in TIME_WAIT is usable by the rendezvous
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def pick_free_port() -> int:
    if port_is_free(DEFAULT_PORT):
        return DEFAULT_PORT
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def option_value(argv: list, name: str):
    """The value of `name VALUE` or `name=VALUE` in argv ("" when it has none), or None when absent."""
    for i, arg in enumerate(argv):
        if arg == name:
            return argv[i + 1] if i + 1 < len(argv) else ""
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def with_master_port(argv: list) -> list:
    """Return the launcher's argv with a usable --master_port; exits with a message when the given one is busy.

    A node of a multi-node launch (--hostfile) never picks a port of its own: every node must name the same one.
    Only the node that hosts the rendezvous checks it: --node_rank 0 under --no_ssh (MASTER_ADDR is node rank 0's
    address), or the host that starts every node over ssh; under --no_ssh another node's port check would test its
    own machine, not the master's."""
    hostfile = option_value(argv, "--hostfile") is not None
    node_rank = option_value(argv, "--node_rank")
    if hostfile and "--no_ssh" in argv and node_rank not in (None, "0"):
        return argv
    for i, arg in enumerate(argv):
        if arg == "--master_port" or arg.startswith("--master_port="):
            port = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            if not port.isdigit():
                sys.exit(f"launch.py: error: --master_port needs a port number, got {port!r}")
            if not port_is_free(int(port)):
                sys.exit(f"launch.py: error: --master_port {port} is in use by another process (another run?); "
                         f"pick another port, or leave --master_port out to get a free one")
            return argv
    if hostfile:
        return argv  # DeepSpeed's default port, the same on every node
    return ["--master_port", str(pick_free_port()), *argv]


class Forwarder:
    """Signal handler state: the first signal goes to the ranks (they save), a second kills the launch."""

    def __init__(self, launcher: subprocess.Popen, multi_node: bool):
        self.launcher, self.multi_node, self.signals, self.first_signal = launcher, multi_node, 0, 0
        self.ranks = lambda: deepspeed_ranks(launcher.pid)  # the orphans instead, once the launcher is gone

    def __call__(self, signum, frame):
        self.signals += 1
        self.first_signal = self.first_signal or signum
        name = signal.Signals(signum).name
        if self.signals > 1:
            print(f"\nlaunch.py: second {name}: killing the run without saving", file=sys.stderr, flush=True)
            os.killpg(self.launcher.pid, signal.SIGKILL)  # orphaned ranks too: they keep the launcher's group
            return
        if self.multi_node:
            self.launcher.send_signal(signum)
            return
        ranks = self.ranks()
        print(f"\nlaunch.py: {name}: asking {len(ranks)} rank(s) to finish the step and save "
              f"(again to kill without saving)", file=sys.stderr, flush=True)
        for proc in ranks:
            try:
                proc.send_signal(signum)
            except psutil.NoSuchProcess:
                pass


def stop_orphans(orphans: list, rc: int) -> int:
    """Name the ranks (process, "rank N") that outlived the launcher, stop them gracefully (SIGTERM: finish the
    step, save; killed past ORPHAN_STOP_S), say how each ended, and return a failing exit code. train.py's ranks
    got the same SIGTERM from the kernel already (rl/run/launch_ranks.py's stop_with_launcher); a second one is
    harmless, and this also stops ranks of scripts that do not arm it."""
    names = ", ".join(f"{name} (pid {proc.pid})" for proc, name in orphans)
    said = f"was killed by {signal.Signals(-rc).name}" if rc < 0 else f"exited {rc}"
    print(f"launch.py: error: DeepSpeed's launch process ended while {names} kept running: a lost launch, not a "
          f"finished run (`deepspeed` {said}; its runner passes on only positive exit codes, and a launch process "
          f"killed by a signal has a negative one). Stopping the orphaned rank(s) with SIGTERM: each finishes its "
          f"step and saves (Ctrl-C kills them without saving)", file=sys.stderr, flush=True)
    for proc, _ in orphans:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs([proc for proc, _ in orphans], timeout=ORPHAN_STOP_S)
    for proc in alive:
        print(f"launch.py: pid {proc.pid} did not stop within {ORPHAN_STOP_S} s of SIGTERM: killing it",
              file=sys.stderr, flush=True)
        proc.kill()
    psutil.wait_procs(alive, timeout=30)
    for proc, name in orphans:  # adopted (become_subreaper), so each one's exit status is ours to read
        code = getattr(proc, "returncode", None)
        ended = "ended" if code is None else f"exited with status {code}" if code >= 0 else \
            f"was ended by {signal.Signals(-code).name}"
        print(f"launch.py: {name} (pid {proc.pid}) {ended}; the run is not finished: continue it with the same "
              f"--output_dir", file=sys.stderr, flush=True)
    return rc if rc > 0 else 128 - rc if rc < 0 else LOST_RANK_EXIT


def main(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    deepspeed = shutil.which("deepspeed") or os.path.join(os.path.dirname(sys.executable), "deepspeed")
    argv = with_master_port(argv)
    # ranks on other machines (DeepSpeed's ssh runner); under --no_ssh every rank of this node is a local child
    multi_node = option_value(argv, "--hostfile") is not None and "--no_ssh" not in argv
    become_subreaper()  # a rank orphaned by its launch process is re-parented here, not to PID 1
    launcher = subprocess.Popen([deepspeed, *argv], start_new_session=True)
    forward = Forwarder(launcher, multi_node)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    watch = RankWatch(launcher.pid)
    while True:
        try:
            rc = launcher.wait(timeout=POLL_S)  # resumes by itself after each handled signal (PEP 475)
            break
        except subprocess.TimeoutExpired:
            watch.poll()
    orphans = watch.outlived_launch()
    if orphans:
        forward.ranks = lambda: [proc for proc, _ in orphans]
        forward.signals = max(forward.signals, 1)  # they are being stopped: the next Ctrl-C kills
        return stop_orphans(orphans, rc)
    if rc < 0:  # the runner itself died of a signal: say so as a shell does, never as a negative status
        return 128 - rc
    if forward.signals and rc == 0:
        # The ranks saved and exited cleanly, but the run was interrupted: say so to the calling shell (128 + signal,
        # as a shell does) so that a script stops here instead of going on to its next command.
        return 128 + forward.first_signal
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
