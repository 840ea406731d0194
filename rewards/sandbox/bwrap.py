"""The bubblewrap command line for one sandboxed process, and the interpreter it runs.

Each process gets fresh user, PID, IPC, network, UTS, cgroup and mount namespaces (`--unshare-all
--unshare-user`), no further user namespaces (`--disable-userns`), uid/gid 65534 inside, a new session (no
TIOCSTI into the caller's terminal), death with its parent, private /proc, /dev and /tmp, and a root that holds
only: /usr read-only (the interpreter and its stdlib; /bin, /lib, /lib64 as the usual symlinks), the
interpreter's prefix read-only when it lives elsewhere, and size-limited tmpfs at /tmp and /work, its files
copied into /work from file descriptors (never bound from the checkout). Another run's files, the checkout, the datasets
and the caller's processes do not exist in that view.
"""
import os
import sys

SANDBOX_UID = 65534
WORK = "/work"


def _which(name: str):
    """shutil.which for a bare name, without importing shutil (zlib, bz2, lzma, fnmatch: ~10 ms of every run)."""
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(directory, name)
        if os.path.exists(path) and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def find_bwrap():
    return _which("bwrap") or next((p for p in ("/usr/bin/bwrap", "/usr/local/bin/bwrap") if os.path.exists(p)),
                                         None)


def _world_reachable(path: str) -> bool:
    """Can an unprivileged user reach this file (every directory on the way searchable, the file executable)?"""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts)):
        if not os.stat(os.sep.join(parts[:i])).st_mode & 0o001:
            return False
    return os.path.exists(path) and bool(os.stat(path).st_mode & 0o001)


def sandbox_python() -> str:
    """The interpreter for programs: $CREDO_SANDBOX_PYTHON, else ours, else the system's, whichever the run's
    unprivileged user can reach (bubblewrap resolves binds as that user: a pyenv interpreter under /root is not)."""
    candidates = [os.environ.get("CREDO_SANDBOX_PYTHON"), os.path.realpath(sys.executable), "/usr/bin/python3",
                  "/usr/local/bin/python3"]
    for candidate in candidates:
        if candidate and os.path.exists(candidate) and (os.getuid() != 0 or _world_reachable(candidate)):
            return os.path.realpath(candidate)
    raise RuntimeError("no Python interpreter that the sandbox user can run; set CREDO_SANDBOX_PYTHON")


def _prefix(python: str) -> str:
    """The install prefix to bind: two levels up from bin/pythonX.Y."""
    return os.path.dirname(os.path.dirname(python))


def bwrap_argv(bwrap: str, python: str, files: dict, work_bytes: int, argv: list) -> list:
    """The command line; files maps a file name in /work to the fd its content is copied from."""
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
           "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox",
           "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
           "--symlink", "usr/lib64", "/lib64"]
    prefix = _prefix(python)
    if not (prefix + os.sep).startswith("/usr/"):
        cmd += ["--ro-bind", prefix, prefix]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--size", str(work_bytes), "--tmpfs", "/tmp",
            "--size", str(work_bytes), "--tmpfs", WORK]
    for name, fd in sorted(files.items()):
        cmd += ["--file", str(fd), f"{WORK}/{name}"]
    cmd += ["--remount-ro", "/", "--chdir", WORK, "--clearenv"]
    env = {"PATH": "/usr/bin:/bin", "HOME": WORK, "TMPDIR": "/tmp", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONIOENCODING": "utf-8", "LANG": "C.UTF-8"}
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    return cmd + ["--", python] + argv
