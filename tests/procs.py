"""Process helpers for tests that check what a run leaves behind, on psutil (a dependency already: the code sandbox
uses it) instead of parsing /proc by hand in each test file."""
import psutil


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie has exited: it only waits for its parent to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def children(pid: int) -> list:
    """The pids of pid's direct children (empty when pid is gone)."""
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        return []


def cmdline(pid: int) -> str:
    """pid's command line joined by spaces, or "" when it is gone or unreadable."""
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def process_state(pid: int) -> str:
    """The kernel's view of a process, for a failure message: its status ("disk-sleep": in uninterruptible I/O) and
    the kernel function it waits in (/proc/PID/wchan: psutil does not read it), or that it is gone."""
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return f"pid {pid} is gone"
    try:
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read() or "-"
    except OSError:
        wchan = "?"
    return f"pid {pid} status {status}, waiting in {wchan}"


def orphaned_workers(marker: str, cwd: str, parent_to_skip: int) -> list:
    """Pids of processes whose command line contains marker, running in cwd, whose parent is not parent_to_skip
    (e.g. the reward workers of this checkout that outlived the trainer that started them)."""
    found = []
    for p in psutil.process_iter(["cmdline", "cwd", "ppid"]):
        info = p.info
        if marker in " ".join(info["cmdline"] or []) and info["cwd"] == cwd and info["ppid"] != parent_to_skip:
            found.append(p.pid)
    return found
