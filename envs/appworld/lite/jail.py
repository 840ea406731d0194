"""The sandbox a lite AppWorld cell runs in: bubblewrap (Debian's `bubblewrap`), plus a cgroup where one is offered.

What the cell gets: new user, PID, IPC, network, UTS and mount namespaces (`--unshare-all`; uid 65534 inside, no
capabilities, no new user namespaces), a root holding only /usr (and its /bin, /lib, /lib64 links), the Python
installation that runs it (read-only), a private /proc, a minimal /dev and an empty 16 MiB /tmp. So the checkout
(tasks.py with the checks and reference solutions), the datasets, the trainer's files and its processes are not
there to read or signal, and there is no network. It dies with the host that started it (`--die-with-parent`).
Its environment is CELL_ENV and nothing else, in the cell and in bubblewrap's own init (PID 1 of the sandbox, whose
/proc/1/environ the cell can read): bwrap itself starts with CELL_ENV, so neither the trainer's PATH nor the host's
PYTHONPATH (the checkout's path) crosses.
Limits: rlimits per process (address space, CPU time, file size, open files, no core) and, where the machine has
cgroup v1 `memory` and `pids` controllers we may write to (as root here), a memory and process limit for the whole
cell. Without that cgroup the memory limit is per process and the process count is bounded only by the PID
namespace (a warning says so, once per host).
"""
import functools
import logging
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import time

logger = logging.getLogger(__name__)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NOBODY = 65534
CGROUP_ROOT = "/sys/fs/cgroup"
MAX_PIDS = 32
TMP_BYTES = 16 << 20
# The whole environment of the sandbox: no variable of the trainer's or the host's (PATH, PYTHONPATH, tokens, paths)
CELL_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1"}
INSTALL_HINT = ("AppWorld lite runs each cell under bubblewrap: install it (`apt-get install -y bubblewrap` on "
                "Debian/Ubuntu, as root; scripts/setup.sh does where it can)")


class SandboxUnavailable(RuntimeError):
    pass


def cell_python() -> tuple:
    """(interpreter, its installation prefix): the base interpreter under the venv (a venv may live in the
    checkout, which the cell must not see; the cell needs only the stdlib)."""
    prefix = os.path.realpath(sys.base_prefix)
    base = os.path.join(prefix, "bin", f"python{sys.version_info.major}.{sys.version_info.minor}")
    return (base if os.path.exists(base) else os.path.realpath(sys.executable)), prefix


def _root_entries() -> list:
    """bwrap arguments for /usr and the top-level links into it (/bin, /lib, /lib64, /sbin), as the host has them."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def bwrap_argv(argv: list) -> list:
    """The bubblewrap command line that runs `argv` (an interpreter under cell_python()'s prefix) in the sandbox;
    start it with env=CELL_ENV (bwrap's init inside keeps the environment bwrap was given, --clearenv or not)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"`bwrap` was not found on PATH. {INSTALL_HINT}.")
    _, prefix = cell_python()
    bound = ["/usr", prefix] + [f"/{n}" for n in ("bin", "sbin", "lib", "lib64", "lib32") if os.path.isdir(f"/{n}")]
    for path in bound:  # the whole point: the checkout must not be inside anything the cell can see
        real = os.path.realpath(path)
        if REPO_ROOT == real or REPO_ROOT.startswith(real.rstrip("/") + "/"):
            raise SandboxUnavailable(f"the checkout {REPO_ROOT} lies inside {real}, which the AppWorld cell sandbox "
                                     "must bind read-only; use a Python installed outside the checkout")
    prefix_bind = [] if prefix.startswith("/usr/") else ["--ro-bind", prefix, prefix]
    return [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL",
            "--uid", str(NOBODY), "--gid", str(NOBODY), *_root_entries(), *prefix_bind,
            "--proc", "/proc", "--dev", "/dev", "--size", str(TMP_BYTES), "--tmpfs", "/tmp", "--chdir", "/tmp",
            "--clearenv", *[a for k, v in CELL_ENV.items() for a in ("--setenv", k, v)], "--", *argv]


@functools.lru_cache(maxsize=None)
def require_sandbox():
    """Refuse clearly, once per process, when bubblewrap is missing or cannot make its namespaces here."""
    python, _ = cell_python()
    try:
        proc = subprocess.run(bwrap_argv([python, "-I", "-S", "-c", "pass"]), capture_output=True, text=True,
                              env=CELL_ENV, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bubblewrap could not start: {exc}. {INSTALL_HINT}.") from None
    if proc.returncode != 0:
        raise SandboxUnavailable(f"bubblewrap cannot build the AppWorld cell sandbox here (exit {proc.returncode}: "
                                 f"{proc.stderr.strip()[-500:]}). {INSTALL_HINT}; it needs root or unprivileged "
                                 "user namespaces.")
    probe = Cgroup(64)  # says so here, in the trainer's log, when cells will get no cgroup
    probe.remove()


def set_rlimits(memory_mb: int, cpu_s: int, file_mb: int = 16):
    mb = 1 << 20
    for which, value in {resource.RLIMIT_AS: memory_mb * mb, resource.RLIMIT_CPU: cpu_s,
                         resource.RLIMIT_FSIZE: file_mb * mb, resource.RLIMIT_NOFILE: 64,
                         resource.RLIMIT_CORE: 0}.items():
        resource.setrlimit(which, (value, value))


class Cgroup:
    """A fresh cgroup v1 pair (memory, pids) below this process's own, for one cell; `dirs` is empty when the
    machine offers none we can write (then only the rlimits hold)."""
    warned = False

    def __init__(self, memory_mb: int, max_pids: int = MAX_PIDS):
        self.dirs = []
        name = f"{self.prefix(os.getpid())}{secrets.token_hex(4)}"
        try:
            for controller, limits in (("memory", {"memory.limit_in_bytes": memory_mb << 20,
                                                   "memory.memsw.limit_in_bytes": memory_mb << 20}),
                                       ("pids", {"pids.max": max_pids})):
                path = os.path.join(CGROUP_ROOT, controller, self._own(controller).lstrip("/"), name)
                os.mkdir(path)
                self.dirs.append(path)
                for key, value in limits.items():
                    if os.path.exists(os.path.join(path, key)):
                        with open(os.path.join(path, key), "w") as f:
                            f.write(str(value))
        except OSError as exc:
            self.remove()
            if not Cgroup.warned:
                Cgroup.warned = True
                logger.warning("AppWorld cells get no cgroup here (%s): the memory limit is per process and the "
                               "process count is bounded only by the PID namespace", exc)

    @staticmethod
    def prefix(host_pid: int) -> str:
        return f"credo-appworld-{host_pid}-"

    @classmethod
    def remove_left_by(cls, host_pid: int):
        """Remove the cgroups of a host that was killed before it could (they sit beside this process's own)."""
        for controller in ("memory", "pids"):
            try:
                parent = os.path.join(CGROUP_ROOT, controller, cls._own(controller).lstrip("/"))
                names = [n for n in os.listdir(parent) if n.startswith(cls.prefix(host_pid))]
            except OSError:
                continue
            left = cls.__new__(cls)
            left.dirs = [os.path.join(parent, n) for n in names]
            left.remove()

    @staticmethod
    def _own(controller: str) -> str:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    return path
        raise OSError(f"no cgroup v1 {controller} controller in /proc/self/cgroup")

    def enter(self):
        """In the child before exec (preexec_fn): it and everything it starts are counted here."""
        for path in self.dirs:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

    def hit_memory_limit(self) -> bool:
        for path in self.dirs:
            failcnt = os.path.join(path, "memory.failcnt")
            if os.path.exists(failcnt):
                with open(failcnt) as f:
                    return int(f.read() or 0) > 0
        return False

    def remove(self):
        """Kill whatever is left in the cgroup and delete it."""
        for path in reversed(self.dirs):
            for _ in range(100):
                try:
                    with open(os.path.join(path, "cgroup.procs")) as f:
                        pids = [int(p) for p in f.read().split()]
                    for pid in pids:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # busy: processes are still dying
                    time.sleep(0.01)
        self.dirs = []
