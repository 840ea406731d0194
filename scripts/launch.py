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

Single node only for the signal forwarding (remote ranks under pdsh are signalled by DeepSpeed's own handler, so a
`--hostfile` launch gets the signal forwarded to the launcher instead).
"""
import os
import shutil
import signal
import socket
import subprocess
import sys

import psutil

from rl.run.launch_ranks import deepspeed_ranks

DEFAULT_PORT = 29500  # DeepSpeed's own default, kept when it is free so that nothing changes for a quiet machine


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


def with_master_port(argv: list) -> list:
    """Return the launcher's argv with a usable --master_port; exits with a message when the given one is busy."""
    for i, arg in enumerate(argv):
        if arg == "--master_port" or arg.startswith("--master_port="):
            port = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else "")
            if not port.isdigit():
                sys.exit(f"launch.py: error: --master_port needs a port number, got {port!r}")
            if not port_is_free(int(port)):
                sys.exit(f"launch.py: error: --master_port {port} is in use by another process (another run?); "
                         f"pick another port, or leave --master_port out to get a free one")
            return argv
    return ["--master_port", str(pick_free_port()), *argv]


class Forwarder:
    """Signal handler state: the first signal goes to the ranks (they save), a second kills the launch."""

    def __init__(self, launcher: subprocess.Popen, multi_node: bool):
        self.launcher, self.multi_node, self.signals, self.first_signal = launcher, multi_node, 0, 0

    def __call__(self, signum, frame):
        self.signals += 1
        self.first_signal = self.first_signal or signum
        name = signal.Signals(signum).name
        if self.signals > 1:
            print(f"\nlaunch.py: second {name}: killing the run without saving", file=sys.stderr, flush=True)
            os.killpg(self.launcher.pid, signal.SIGKILL)
            return
        if self.multi_node:
            self.launcher.send_signal(signum)
            return
        ranks = deepspeed_ranks(self.launcher.pid)
        print(f"\nlaunch.py: {name}: asking {len(ranks)} rank(s) to finish the step and save "
              f"(again to kill without saving)", file=sys.stderr, flush=True)
        for proc in ranks:
            try:
                proc.send_signal(signum)
            except psutil.NoSuchProcess:
                pass


def main(argv: list) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    deepspeed = shutil.which("deepspeed") or os.path.join(os.path.dirname(sys.executable), "deepspeed")
    argv = with_master_port(argv)
    multi_node = any(a == "--hostfile" or a.startswith("--hostfile=") for a in argv)
    launcher = subprocess.Popen([deepspeed, *argv], start_new_session=True)
    forward = Forwarder(launcher, multi_node)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    rc = launcher.wait()  # wait() resumes by itself after each handled signal (PEP 475)
    if forward.signals and rc == 0:
        # The ranks saved and exited cleanly, but the run was interrupted: say so to the calling shell (128 + signal,
        # as a shell does) so that a script stops here instead of going on to its next command.
        return 128 + forward.first_signal
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
