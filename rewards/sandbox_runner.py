"""Runs one untrusted program under limits; started by rewards.code.execute in its own session.

Protocol: argv[1] is a JSON job {"dir", "timeout_s", "memory_mb", "max_output_bytes", "max_processes",
"max_file_mb"}; the program is DIR/main.py, its stdin is DIR/stdin.txt. One JSON result line on stdout.

This process stays privileged and becomes a child subreaper (prctl), so every descendant of the program, even
one that called setsid() to escape its process group, is re-parented here and killed when the program ends. The
program itself runs in a forked child that, before exec: enters a new network namespace (no interfaces but a
down loopback: no network), drops to the `nobody` user when started as root (cannot write the repo, signal the
trainer, or exceed a per-user process limit), and sets rlimits (CPU time, address space, processes, file size,
open files, no core dumps).
"""
import ctypes
import json
import os
import resource
import select
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
PRIVATE_TMP_DIRS = (b"/tmp", b"/var/tmp", b"/dev/shm")
NOBODY = 65534
SAFE_ENV_KEYS = ("LANG", "LC_ALL")


def _child(job: dict, out_w: int, err_w: int, in_r: int):
    """In the forked child: isolate, limit, exec. Never returns."""
    try:
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        python = sandbox_python()  # chosen while still privileged: it depends on who will run it
        libc = ctypes.CDLL(None, use_errno=True)
        network_isolated = libc.unshare(CLONE_NEWNET) == 0
        _private_tmp(libc)
        mb = 1024 * 1024
        limits = {resource.RLIMIT_CPU: int(job["timeout_s"]) + 1, resource.RLIMIT_AS: job["memory_mb"] * mb,
                  resource.RLIMIT_FSIZE: job["max_file_mb"] * mb, resource.RLIMIT_NOFILE: 64, resource.RLIMIT_CORE: 0,
                  resource.RLIMIT_NPROC: job["max_processes"]}
        for which, value in limits.items():
            resource.setrlimit(which, (value, value))
        if os.getuid() == 0:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        env = {"PATH": "/usr/bin:/bin", "HOME": job["dir"], "TMPDIR": job["dir"], "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONIOENCODING": "utf-8", "CREDO_SANDBOX_NETWORK": "none" if network_isolated else "blocked"}
        env.update({k: os.environ[k] for k in SAFE_ENV_KEYS if k in os.environ})
        os.chdir(job["dir"])
        argv = [python, "-I", "-B"]
        if not network_isolated:  # no namespace here: refuse socket creation inside the interpreter instead
            argv += ["-c", _SOCKET_GUARD, "main.py"]
        else:
            argv += ["main.py"]
        os.execve(python, argv, env)
    except BaseException as exc:  # report why the sandbox could not start the program, on its stderr
        os.write(2, f"sandbox setup failed: {type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(127)


def _private_tmp(libc):
    """A mount namespace with fresh, empty tmpfs on the world-writable directories: what the program writes there
    vanishes with it. Best effort: without the privilege the program shares them (documented in rewards/code.py)."""
    if libc.unshare(CLONE_NEWNS) != 0:
        return False
    if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return False
    for path in PRIVATE_TMP_DIRS:
        if os.path.isdir(path):
            libc.mount(b"tmpfs", path, b"tmpfs", 0, b"size=64m,mode=1777")
    return True


def _world_executable(path: str) -> bool:
    """Can an unprivileged user run this file (every directory on the way searchable, the file executable)?"""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    for i in range(2, len(parts)):
        if not os.stat(os.sep.join(parts[:i])).st_mode & 0o001:
            return False
    return os.path.exists(path) and bool(os.stat(path).st_mode & 0o001)


def sandbox_python() -> str:
    """The interpreter for programs: $CREDO_SANDBOX_PYTHON, else ours, else the system's, whichever `nobody` can
    run (a pyenv interpreter under /root cannot be)."""
    candidates = [os.environ.get("CREDO_SANDBOX_PYTHON"), sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"]
    if os.getuid() != 0:
        return next(c for c in candidates if c)
    for candidate in candidates:
        if candidate and os.path.exists(candidate) and _world_executable(candidate):
            return os.path.realpath(candidate)
    raise RuntimeError("no Python interpreter that the sandbox user can run; set CREDO_SANDBOX_PYTHON")


_SOCKET_GUARD = """
import socket, _socket, runpy, sys
def _blocked(*a, **k):
    raise PermissionError("network access is disabled in the credo sandbox")
socket.socket = _socket.socket = socket.create_connection = _blocked
sys.argv = ["main.py"]
runpy.run_path("main.py", run_name="__main__")
"""


def _kill_descendants():
    """SIGKILL every process below this one (they are all re-parented here: we are a subreaper)."""
    import psutil
    me = psutil.Process()
    for _ in range(50):  # a fork bomb may spawn while we kill: repeat until nothing is left
        children = me.children(recursive=True)
        if not children:
            return
        for child in children:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(children, timeout=0.2)


def run(job: dict) -> dict:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r = os.open(os.path.join(job["dir"], "stdin.txt"), os.O_RDONLY)
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        _child(job, out_w, err_w, in_r)
    os.close(out_w)
    os.close(err_w)
    os.close(in_r)
    buffers = {out_r: bytearray(), err_r: bytearray()}
    deadline = start + job["timeout_s"]
    status, wait_status, exited = None, None, False
    while not exited:
        ready, _, _ = select.select([out_r, err_r], [], [], 0.005)
        for fd in ready:
            chunk = os.read(fd, 65536)
            buffers[fd] += chunk
        if len(buffers[out_r]) + len(buffers[err_r]) > job["max_output_bytes"]:
            status = "output_limit"
        elif time.perf_counter() > deadline:
            status = "timeout"
        if status:
            os.kill(pid, signal.SIGKILL)
        done, wait_status = os.waitpid(pid, 0 if status else os.WNOHANG)
        exited = done != 0
    for fd in (out_r, err_r):  # what the program wrote just before it exited (pipes may stay open in a grandchild)
        while select.select([fd], [], [], 0)[0] and len(buffers[fd]) <= job["max_output_bytes"]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buffers[fd] += chunk
        os.close(fd)
    wall = time.perf_counter() - start
    _kill_descendants()
    returncode = os.waitstatus_to_exitcode(wait_status)
    stderr = bytes(buffers[err_r])
    if status is None:
        if returncode == 0:
            status = "ok"
        elif returncode in (-signal.SIGXCPU, -signal.SIGKILL) and wall >= job["timeout_s"] * 0.5:
            status = "timeout"  # RLIMIT_CPU: the program burnt its CPU-time budget
        elif b"MemoryError" in stderr[-4000:]:
            status = "memory"
        elif returncode < 0:
            status = "killed"
        else:
            status = "error"
    cap = job["max_output_bytes"]
    return {"status": status, "returncode": returncode, "wall_s": wall,
            "stdout": bytes(buffers[out_r][:cap]).decode("utf-8", "replace"),
            "stderr": stderr[:cap].decode("utf-8", "replace")}


if __name__ == "__main__":
    print(json.dumps(run(json.loads(sys.argv[1]))), flush=True)
