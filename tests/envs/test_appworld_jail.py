"""The lite AppWorld cell's sandbox (envs/appworld/lite/jail.py): bubblewrap namespaces, a cgroup for the whole
cell where the machine has one, nothing left running afterwards, and a clear refusal without bubblewrap."""
import os

import psutil
import pytest

from envs.appworld.lite import jail
from envs.appworld.lite.backend import LiteBackend

TASK = "notes_tag_count_2"
_probe = jail.Cgroup(64)
HAS_CGROUP = bool(_probe.dirs)
_probe.remove()


@pytest.fixture()
def backend():
    backend = LiteBackend()
    backend.initialize(TASK)
    yield backend
    backend.close(TASK)


def leftovers(marker: str) -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]


def test_a_cell_is_nobody_alone_in_its_namespaces(backend):
    out = backend.execute(TASK, "import posixpath\nos = posixpath.os\nprint(os.getuid(), os.getpid(), "
                                "sorted(os.listdir('/proc'))[:3], sorted(os.listdir('/tmp')))\n"
                                "import pkgutil\nsocket = pkgutil.resolve_name('socket')\n"
                                "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1)\n"
                                "except OSError as exc:\n    print('no network:', repr(exc)[:60])")
    first, second = out.splitlines()
    uid, pid = first.split()[:2]
    assert uid == "65534" and int(pid) < 10 and first.endswith("[]")  # a fresh PID namespace and an empty /tmp
    assert second.startswith("no network:")


ENVIRON_PROBE = """import posixpath
os = posixpath.os
print(sorted(os.environ.items()))
for pid in sorted(p for p in os.listdir('/proc') if p.isdigit()):
    for name in ('environ', 'cmdline'):
        try:
            fd = os.open(f'/proc/{pid}/{name}', 0)
            print(pid, name, os.read(fd, 1 << 20))
        except OSError as exc:
            print(pid, name, 'unreadable', exc)
"""


def test_a_cell_sees_a_clean_environment_not_the_trainers_nor_the_launchers(backend, monkeypatch):
    monkeypatch.setenv("CREDO_TRAINER_SECRET", "s3cret-of-the-trainer")
    out = backend.execute(TASK, ENVIRON_PROBE)
    environ, procs = out.splitlines()[0], out.splitlines()[1:]
    # only what jail.CELL_ENV gives, plus what bwrap (PWD) and Python's UTF-8 locale coercion (LC_CTYPE) add
    assert dict(eval(environ)) == {**jail.CELL_ENV, "PWD": "/tmp", "LC_CTYPE": "C.UTF-8"}, environ
    assert any(line.startswith("1 environ b'") for line in procs), out  # bwrap's init: readable, so it must be clean
    for leak in (jail.REPO_ROOT, "PYTHONPATH", "s3cret-of-the-trainer", os.environ["PATH"]):
        assert leak not in out, f"{leak!r} is visible to the cell: " + \
            " | ".join(line[:200] for line in out.splitlines() if leak in line)


def test_processes_a_cell_starts_are_capped_and_do_not_outlive_it(backend):
    marker = "301.25"  # an unusual argument to find its sleepers by
    code = ("import posixpath\nos = posixpath.os\nstarted = 0\nfor _ in range(80):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        os.setsid()\n"
            f"        os.execv('/usr/bin/sleep', ['sleep', {marker!r}])\n    started += 1\nprint(started)")
    out = backend.execute(TASK, code)
    if HAS_CGROUP:
        assert int(out) < jail.MAX_PIDS, out
    assert leftovers(marker) == [], "a cell's process outlived it"


@pytest.mark.skipif(not HAS_CGROUP, reason="no writable cgroup v1 memory/pids here: the memory limit is per process")
def test_the_memory_limit_holds_for_the_whole_cell_not_per_process(backend):
    backend.memory_mb = 256  # each child below stays under it; together they do not
    code = ("import operator, posixpath, time\nos = posixpath.os\nfor _ in range(4):\n    if os.fork() == 0:\n"
            "        block = b'x' * (100 << 20)\n        time.sleep(1.5)\n        operator.attrgetter('_exit')(os)(0)\n"
            "print('fitted', sum(os.wait()[1] == 0 for _ in range(4)))")
    out = backend.execute(TASK, code)
    assert "fitted 4" not in out, out


def test_without_bubblewrap_the_sandbox_refuses_with_the_install_command(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(jail.SandboxUnavailable, match="apt-get install -y bubblewrap"):
        jail.bwrap_argv(["python3"])


def cell_cgroups() -> set:
    found = set()
    for controller in ("memory", "pids"):
        try:
            parent = os.path.join(jail.CGROUP_ROOT, controller, jail.Cgroup._own(controller).lstrip("/"))
            found |= {os.path.join(parent, n) for n in os.listdir(parent) if n.startswith("credo-appworld-")}
        except OSError:
            pass
    return found


# serial: it compares every AppWorld cell cgroup on the machine before and after (they are named after the world host's
# pid, not this test's), so another worker's AppWorld test would show as a leftover
@pytest.mark.serial
def test_no_cgroup_outlives_its_cell(backend):
    before = cell_cgroups()
    backend.timeout_s = 1.0
    assert "TimeoutError" in backend.execute(TASK, "while True:\n    pass")
    backend.execute(TASK, "print(1)")
    assert cell_cgroups() - before == set()
