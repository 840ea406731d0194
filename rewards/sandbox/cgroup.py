"""A cgroup (v1 `memory` + `pids`) per run: one memory and process limit for everything the run starts, children
and shared memory included, which per-process rlimits cannot give. Created under this process's own cgroup in each
hierarchy, filled with the run's processes (they join before exec), emptied by SIGKILL and removed afterwards.
"""
import os
import signal
import time

CGROUP_ROOT = "/sys/fs/cgroup"
PREFIX = "credo-run-"
STALE_AFTER_S = 120  # an empty run cgroup this old was left by a runner that was killed (-9) before removing it


def _own_path(controller: str):
    """Where this process sits in a v1 hierarchy (/proc/self/cgroup "4:memory:/a/b" -> /sys/fs/cgroup/memory/a/b)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controller in controllers.split(","):
                return os.path.join(CGROUP_ROOT, controller, path.lstrip("/"))
    return None


def _write(path: str, value):
    with open(path, "w") as f:
        f.write(str(value))


def _read_int(path: str, key: str = None) -> int:
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return 0
    if key is None:
        return int(text.strip() or 0)
    fields = dict(line.split() for line in text.splitlines() if line.count(" ") == 1)
    return int(fields.get(key, 0))


def sweep_stale(parent: str):
    """Remove run cgroups that a killed runner left behind (rmdir refuses one that still has processes)."""
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(parent, name)
        try:
            if time.time() - os.stat(path).st_mtime > STALE_AFTER_S:
                os.rmdir(path)
        except OSError:
            pass


class RunCgroup:
    """Both hierarchies for one run. `create` returns None where they are not writable (not root, no v1 mounts);
    the caller then falls back to rlimits and says so."""

    def __init__(self, paths: dict):
        self.paths = paths  # controller -> directory

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int):
        name = PREFIX + os.urandom(6).hex()  # as secrets.token_hex(6), without its imports
        paths = {}
        try:
            for controller in ("memory", "pids"):
                parent = _own_path(controller)
                if parent is None or not os.access(parent, os.W_OK):
                    raise OSError(f"no writable {controller} cgroup")
                sweep_stale(parent)
                paths[controller] = os.path.join(parent, name)
                os.mkdir(paths[controller])
            memory = paths["memory"]
            _write(os.path.join(memory, "memory.limit_in_bytes"), memory_bytes)
            if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):  # no escape into swap
                _write(os.path.join(memory, "memory.memsw.limit_in_bytes"), memory_bytes)
            _write(os.path.join(paths["pids"], "pids.max"), max_pids)
        except OSError:
            cls(paths).remove()
            return None
        return cls(paths)

    def join(self, pid: int = 0):
        """Move a process (0: the caller; used in the child before exec) into the run's cgroups."""
        for path in self.paths.values():
            _write(os.path.join(path, "cgroup.procs"), pid or os.getpid())

    def pids(self) -> set:
        found = set()
        for path in self.paths.values():
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    found.update(int(line) for line in f if line.strip())
            except OSError:
                pass
        return found

    def kill_all(self):
        """SIGKILL until empty: a fork bomb spawns while we kill, but pids.max bounds it and each round shrinks it."""
        for _ in range(200):
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)
        return False

    def ran_out_of_memory(self) -> bool:
        memory = self.paths.get("memory")
        if not memory:
            return False
        return _read_int(os.path.join(memory, "memory.oom_control"), "oom_kill") > 0

    def peak_memory_bytes(self) -> int:
        memory = self.paths.get("memory")
        return _read_int(os.path.join(memory, "memory.max_usage_in_bytes")) if memory else 0

    def remove(self):
        for path in self.paths.values():
            for _ in range(100):  # rmdir is refused while the kernel still tears down the last killed process
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
