"""The code sandbox against hostile programs: each ends as a failed result with a reason, within its limit,
with this process alive, the repository unchanged and nothing left running."""
import os
import subprocess
import time

import psutil
import pytest

from rewards.code import execute, run_many, run_tests
from rewards.sandbox.runner import UID_BASE
from tests.helpers import REPO_ROOT

# Alone (scripts/test.sh's serial phase): the autouse check below compares `git status` of the whole checkout, which
# another worker's test writes in (output/eval/...), and looks for every sandbox uid's process on the machine, which
# another worker's sandboxed programs have; neither can tell this test's from another's. The runaway programs also
# assert wall-clock bounds of a few seconds.
pytestmark = pytest.mark.serial


def repo_state():
    """The checkout's changed, new and ignored files, less the bytecode caches this interpreter writes on a first
    import (a fresh clone has none, so the first test to import a module would see one appear). Ignored entries as
    --ignored=matching lists them: an ignored folder by its name, without the walk of every file below it that the
    default mode makes to collapse a folder (0.2-0.4 s a call with the virtualenvs inside the checkout), and an
    ignored file in a folder that is not ignored by its own name, so a new one there shows where the default mode
    can fold it into its folder's line."""
    out = subprocess.run(["git", "status", "--porcelain", "--ignored=matching"], cwd=REPO_ROOT, capture_output=True,
                         text=True)
    return [line for line in out.stdout.splitlines() if not line.rstrip("/").endswith("__pycache__")]


def sandbox_processes():
    """Processes of runs that outlive them: each run has its own uid from UID_BASE up (rewards/sandbox/runner.py);
    one still there a second later is a leak, not a run of another test or benchmark on this machine (nor one of
    ours still being torn down: the second look is the grace period)."""
    def now():
        return {p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real >= UID_BASE}
    first = now()
    if not first:
        return []
    time.sleep(1.0)
    return sorted(first & now())


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = repo_state()
    yield
    assert sandbox_processes() == []
    assert repo_state() == before


def test_a_correct_program_passes_and_a_wrong_one_gets_feedback():
    ok = run_tests("def add(a, b):\n    return a + b\n", ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"])
    assert (ok.passed, ok.total, ok.score, ok.status) == (2, 2, 1.0, "ok")
    bad = run_tests("def add(a, b):\n    return a - b\n", ["assert add(1, 0) == 1", "assert add(1, 2) == 3"])
    assert (bad.passed, bad.total, bad.score) == (1, 2, 0.5)
    assert "assert add(1, 2) == 3" in bad.feedback and "AssertionError" in bad.feedback


@pytest.mark.parametrize("code,status,limit_s", [
    ("while True:\n    pass\n", "timeout", 6),
    ("import time\ntime.sleep(10**6)\n", "timeout", 6),
    ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(1)\n", "timeout", 6),
    ("x = bytearray(8 * 1024**3)\n", "memory", 5),
    ("while True:\n    print('y' * 10000)\n", "output_limit", 5),
    ("import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return f(n + 1)\nf(0)\n", None, 6),
    ("def f(n):\n    return f(n + 1)\nf(0)\n", "error", 5),
])
def test_runaway_programs_end_with_a_reason_within_the_limit(code, status, limit_s):
    # the ones that only the deadline ends wait for all of it: 1 s shows it as well as 2 s; the others end on
    # their own, and keep 2 s of slack for a busy machine's start-up
    timeout_s = 1.0 if status == "timeout" else 2.0
    start = time.perf_counter()
    result = execute(code, timeout_s=timeout_s, memory_mb=512, max_output_bytes=100_000)
    assert time.perf_counter() - start < limit_s
    assert result.status != "ok"
    if status is not None:
        assert result.status == status, result
    else:  # unbounded recursion either overflows the C stack (killed) or hits a limit
        assert result.status in ("killed", "error", "memory", "timeout")


def test_a_fork_bomb_is_contained():
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    start = time.perf_counter()
    result = execute(code, timeout_s=1.0, max_processes=32)  # it forks until the deadline: 1 s of it is enough
    assert result.status in ("timeout", "error", "killed")
    assert time.perf_counter() - start < 15


def test_a_child_that_outlives_the_program_is_killed():
    code = ("import os, time, threading\n"
            "if os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
            "threading.Thread(target=time.sleep, args=(60,), daemon=False).start()\n"
            "print('parent done')\n")
    result = execute(code, timeout_s=1.5)  # the lingering thread keeps the program up to the deadline
    assert "parent done" in result.stdout
    # the autouse fixture checks that no sandbox process survives


def test_files_outside_the_sandbox_cannot_be_written_or_deleted():
    target = os.path.join(REPO_ROOT, "README.md")
    code = (f"import os\nopen({target!r}, 'a').write('pwned')\n")
    assert execute(code).status == "error"
    removal = execute(f"import os\nos.remove({target!r})\n")
    # PermissionError as `nobody`; FileNotFoundError when the checkout is under /tmp (hidden by the private /tmp)
    assert removal.status == "error" and ("PermissionError" in removal.stderr or "FileNotFoundError" in removal.stderr)
    assert os.path.exists(target)
    inside = execute("open('note.txt', 'w').write('ok')\nprint(open('note.txt').read())\n")
    assert inside.status == "ok" and inside.stdout.strip() == "ok"  # its own directory is writable
    marker = "/tmp/credo-sandbox-escape-test"
    scratch = execute(f"open({marker!r}, 'w').write('x')\nprint('wrote')\n")
    assert scratch.stdout.strip() == "wrote" and not os.path.exists(marker)  # a private /tmp, gone with it


def test_the_parent_environment_is_not_visible():
    os.environ["CREDO_TEST_SECRET"] = "hunter2"
    try:
        result = execute("import os\nprint(os.environ.get('CREDO_TEST_SECRET'))\n")
    finally:
        del os.environ["CREDO_TEST_SECRET"]
    assert result.stdout.strip() == "None"


def test_no_network_even_to_a_local_port():
    import socket
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    try:
        result = execute(f"import socket\ns = socket.socket()\ns.settimeout(2)\ns.connect(('127.0.0.1', {port}))\n"
                         "print('connected')\n")
        with pytest.raises(socket.timeout):  # nothing reached our port: the run's loopback is its own
            server.accept()
    finally:
        server.close()
    assert result.status == "error" and "connected" not in result.stdout
    assert "Connection refused" in result.stderr or "Network is unreachable" in result.stderr


def test_killing_the_parent_is_refused():
    result = execute(f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\n")
    # our pid does not exist in the run's PID namespace (or names one of its own processes); we are still here
    assert result.status in ("error", "killed")


def test_many_programs_run_in_parallel_and_come_back_in_order():
    jobs = [(f"def f():\n    return {i}\n", [f"assert f() == {i}"]) for i in range(6)]
    jobs[3] = ("def f():\n    while True: pass\n", ["assert f() == 3"])
    results = run_many([(p, t) for p, t in jobs], workers=2, timeout_s=2.0)  # job 3 waits for the whole deadline
    assert [r.score for r in results] == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0]
    assert results[3].status == "timeout"


def test_tests_reach_the_programs_objects_only_through_handles():
    program = ("class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n"
               "        self.items.append(x)\n        return self\n"
               "    def __len__(self):\n        return len(self.items)\n"
               "def checked(x):\n    if x < 0:\n        raise ValueError('negative')\n    return {'x': (x, [x])}\n")
    tests = ["s = Stack().push(1).push(2)\nassert len(s) == 2 and s.items == [1, 2]",
             "assert checked(3) == {'x': (3, [3])}",
             "try:\n    checked(-1)\n    raise AssertionError('no error')\n"
             "except ValueError as e:\n    assert 'negative' in str(e)",
             "assert type(Stack()).__name__ == 'Remote'"]  # an instance stays in the program's process
    result = run_tests(program, tests)
    assert (result.passed, result.status) == (4, "ok"), result


def test_subclasses_of_plain_data_and_the_programs_own_objects_still_compare():
    """Values compare on the harness's side as plain data (a Counter as a dict, a namedtuple as a tuple), and two
    objects of the program compare by the program's own __eq__ (rewards/sandbox/harness.py)."""
    program = ("import collections, enum\nPair = collections.namedtuple('Pair', 'lo hi')\n"
               "class Level(enum.IntEnum):\n    HIGH = 3\n"
               "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
               "    def __eq__(self, other):\n        return (self.x, self.y) == (other.x, other.y)\n"
               "def counts(s):\n    return collections.Counter(s)\ndef pair():\n    return Pair(1, 2)\n"
               "def level():\n    return Level.HIGH\ndef ordered():\n    return collections.OrderedDict(a=1)\n")
    tests = ["assert counts('aab') == {'a': 2, 'b': 1}", "assert pair() == (1, 2)", "assert level() == 3",
             "assert ordered() == {'a': 1}", "assert Point(1, 2) == Point(1, 2)", "assert Point(1, 2) != Point(2, 1)",
             "assert sorted(counts('ba')) == ['a', 'b']"]
    result = run_tests(program, tests)
    assert (result.passed, result.status) == (len(tests), "ok"), result


def test_a_run_that_does_not_end_ok_scores_zero_even_after_its_tests_passed():
    lingering = ("import threading, time\nthreading.Thread(target=time.sleep, args=(30,)).start()\n"
                 "def f():\n    return 1\n")
    result = run_tests(lingering, ["assert f() == 1"], timeout_s=2.0)
    assert (result.score, result.status) == (0.0, "timeout")


def test_every_run_says_how_it_was_isolated():
    result = execute("print(1)")
    assert result.isolation in ("bwrap+cgroup", "bwrap+rlimits")
    if os.getuid() == 0 and os.access("/sys/fs/cgroup/pids", os.W_OK):  # CI and these machines: root, cgroup v1
        assert result.isolation == "bwrap+cgroup"


def test_without_bubblewrap_execute_refuses_unless_the_fallback_is_asked_for(monkeypatch):
    import rewards.code as code
    monkeypatch.setattr(code, "find_bwrap", lambda: None)  # a machine without bubblewrap
    code._checked.cache_clear()
    try:
        with pytest.raises(code.SandboxUnavailable, match="apt-get install -y bubblewrap"):
            execute("print(1)")
        monkeypatch.setenv("CREDO_CODE_SANDBOX", "none")
        before = code.sandbox_counts()
        with pytest.warns(RuntimeWarning, match="WITHOUT bubblewrap"):
            result = execute("print(1)")
        assert result.stdout == "1\n" and result.isolation.startswith("none+")
        after = code.sandbox_counts()
        assert after[result.isolation] == before.get(result.isolation, 0) + 1
        monkeypatch.setenv("CREDO_CODE_SANDBOX", "nsjail")
        with pytest.raises(code.SandboxUnavailable, match="CREDO_CODE_SANDBOX='nsjail'"):
            execute("print(1)")
    finally:
        code._checked.cache_clear()


def test_forged_replies_to_the_harness_count_for_nothing():
    forge = ("import os\nfor reply in (b'{\"ok\": true}', b'{\"exc\": [\"SystemExit\", \"0\"]}',"
             " b'{\"ok\": {\"x\": 1}}', b'[' * 100000, b'not json'):\n    os.write(4, reply + b'\\n')\n")
    result = run_tests("def f():\n    return 0\n" + forge, ["assert f() == 1"])
    assert (result.passed, result.score) == (0, 0.0)  # the harness stops at the first forged reply
