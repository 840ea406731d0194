"""Hostile programs, written as a policy might stumble on them, against rewards/code.py: runs that attack a sibling
running at the same time, programs that fake their test results, and state that outlives a run or exceeds its
limits. Each one beat the sandbox before bubblewrap and the two-process harness (issue 23); the shadowed names, the
always-equal objects, the printed "MemoryError" and the uid shared across PID namespaces beat it before issue 51."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from rewards.code import _RUNNER, execute, run_tests
from rewards.sandbox import uids
from tests.helpers import REPO_ROOT

WRONG = "def f():\n    return 0\n"
TESTS = ["assert f() == 1", "assert f() + 1 == 2"]
LIMITS = dict(timeout_s=3.0, memory_mb=128, max_processes=16)


def concurrently(first, second, delay_s=0.4):
    """Start `first`, then `second` while the first is still running; both results."""
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(first)
        time.sleep(delay_s)
        b = pool.submit(second)
        return a.result(), b.result()


# --- sibling attacks: two runs at once ---------------------------------------------------------------------------

SIBLING_DIRS = """
import glob, os, re, time
def sibling_dirs():  # run directories on a sibling runner's command line, or listed where runs live
    found = set(glob.glob("/run/credo-sandbox/run-*") + glob.glob("/tmp/credo-sandbox*/run-*"))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.update(re.findall(r"/[\\w/.-]*credo-sandbox[\\w-]*/run-\\w+", open(f"/proc/{pid}/cmdline").read()))
        except OSError:
            pass
    here = os.path.realpath(".")
    return [d for d in found if os.path.realpath(d) != here]
"""
REWRITE_SIBLINGS = SIBLING_DIRS + """
end = time.time() + 2.5
while time.time() < end:
    for d in sibling_dirs():
        try:
            text = open(d + "/main.py").read()
            if "return 0" in text:
                open(d + "/main.py", "w").write(text.replace("return 0", "return 1"))
        except OSError:
            pass
"""


def test_sibling_cannot_rewrite_main_py():
    _, victim = concurrently(lambda: execute(REWRITE_SIBLINGS, **LIMITS), lambda: run_tests(WRONG, TESTS, **LIMITS))
    assert victim.score == 0.0


SYMLINK_STDIN = SIBLING_DIRS + """
end = time.time() + 2.5
while time.time() < end:
    for d in sibling_dirs():
        try:
            os.remove(d + "/stdin.txt")
            os.symlink(%r, d + "/stdin.txt")
        except OSError:
            pass
"""


def test_sibling_cannot_swap_stdin_for_a_symlink_to_a_root_only_file(tmp_path):
    secret = tmp_path / "root-only.txt"
    secret.write_text("s3cret-of-the-trainer")
    os.chmod(secret, 0o600)
    _, victim = concurrently(lambda: execute(SYMLINK_STDIN % str(secret), **LIMITS),
                             lambda: execute("import sys\nprint(sys.stdin.read())\n", stdin="hello", **LIMITS))
    assert "s3cret" not in victim.stdout
    assert victim.stdout.strip() == "hello"


def test_kill_minus_one_does_not_reach_a_sibling():
    attacker = "import os, time\nend = time.time() + 2\nwhile time.time() < end:\n    try:\n        os.kill(-1, 9)\n" \
               "    except OSError:\n        pass\n"
    correct = "import time\ntime.sleep(1.0)\ndef f():\n    return 1\n"
    _, victim = concurrently(lambda: execute(attacker, **LIMITS), lambda: run_tests(correct, TESTS, **LIMITS), 0.2)
    assert (victim.score, victim.status) == (1.0, "ok")


PTRACE = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
end = time.time() + 2
while time.time() < end:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in (os.getpid(), os.getppid()) or int(pid) < 3:
            continue
        if libc.ptrace(16, int(pid), 0, 0) == 0:  # PTRACE_ATTACH
            print("ATTACHED", pid, flush=True)
            libc.ptrace(17, int(pid), 0, 0)
"""


def test_sibling_cannot_be_ptraced():
    attacker, victim = concurrently(lambda: execute(PTRACE, **LIMITS),
                                    lambda: execute("import time\ntime.sleep(1.5)\nprint('alive')\n", **LIMITS), 0.2)
    assert "ATTACHED" not in attacker.stdout
    assert victim.stdout.strip() == "alive"


def test_holding_the_process_limit_does_not_starve_a_sibling():
    hog = ("import os, time\nkids = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n"
           "        break\n    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n    kids += 1\n"
           "print('holding', kids, flush=True)\ntime.sleep(2.5)\n")
    needs_children = ("import subprocess, sys\nouts = [subprocess.run([sys.executable, '-c', 'print(7)'], "
                      "capture_output=True).stdout for _ in range(3)]\nprint(outs)\n")
    hog_result, victim = concurrently(lambda: execute(hog, **LIMITS), lambda: execute(needs_children, **LIMITS), 0.8)
    assert "holding" in hog_result.stdout  # the hog did reach its limit
    assert (victim.status, victim.stdout.strip()) == ("ok", "[b'7\\n', b'7\\n', b'7\\n']"), victim


# --- faked results: each program below is wrong and must score 0 -------------------------------------------------

MARKER = "__CREDO_TEST_RESULTS__"
FAKERS = {
    "marker_then_exit": f"import os\nprint({MARKER!r} + '[null, null]', flush=True)\nos._exit(0)\n",
    "marker_then_flood": f"print({MARKER!r} + '[null, null]', flush=True)\nwhile True:\n    print('x' * 4096)\n",
    "marker_then_hang": f"print({MARKER!r} + '[null, null]', flush=True)\nwhile True:\n    pass\n",
    "replaced_exec": "def exec(*args, **kwargs):\n    pass\n",
    "replaced_compile_and_builtins": "import builtins, json\nbuiltins.__dict__['exec'] = lambda *a, **k: None\n"
                                     "compile = lambda *a, **k: None\n",
    "replaced_json_module": "import sys, types\nfake = types.ModuleType('json')\n"
                            "fake.dumps = lambda results: '[' + ', '.join(['null'] * len(results)) + ']'\n"
                            "sys.modules['json'] = fake\n",
    "replaced_print": f"import builtins\ndef print(*a, **k):\n    builtins.print({MARKER!r} + '[null, null]', "
                      "flush=True)\n",
    "atexit_marker": f"import atexit\natexit.register(lambda: print({MARKER!r} + '[null, null]', flush=True))\n",
    "results_swap": "import sys\ndef swap(frame, event, arg):\n    results = frame.f_globals.get('_credo_results')\n"
                    "    if type(results) is list:\n        results[:] = [None] * len(results)\n"
                    "sys.setprofile(swap)\n",
    "reads_the_tests": "import re\nsrc = open(__file__ if '__file__' in dir() else 'main.py').read()\n"
                       "want = [int(x) for x in re.findall(r'== (\\d+)', src)]\ndef f():\n"
                       "    return want[0] if want else 0\n",
}


@pytest.mark.parametrize("name", sorted(FAKERS))
def test_a_wrong_program_cannot_fake_passing_tests(name):
    result = run_tests(WRONG + FAKERS[name], TESTS, timeout_s=2.0, max_output_bytes=20_000)
    assert (result.passed, result.score) == (0, 0.0), (name, result)


# A wrong program (f returns 0 or nothing useful) that redefines a name the tests call, so that the assert holds
SHADOWS = {
    "set": ("def f(*a):\n    return 0\nclass set:\n    def __init__(s, *a):\n        pass\n"
            "    def __eq__(s, o):\n        return True\n",
            "assert set(f((3, 4, 5, 6), (5, 7, 4, 10))) == set((4, 5))"),  # issue 51's own example (MBPP 2)
    "sorted": ("def f(xs):\n    return xs[:1]\ndef sorted(xs, **k):\n    return [1, 2, 3]\n",
               "assert sorted(f([3, 1, 2])) == [1, 2, 3]"),
    "abs": ("def f():\n    return 0.0\ndef abs(x):\n    return 0\n", "assert abs(f() - 2.5) < 1e-9"),
    "len": ("def f():\n    return []\nlen = lambda x: 3\n", "assert len(f()) == 3"),
    "max": ("def f():\n    return [1]\ndef max(*a):\n    return 5\n", "assert max(f()) == 5"),
    "math": ("import math, types\nmath = types.SimpleNamespace(isclose=lambda *a, **k: True)\ndef f():\n    return 0.0\n",
             "assert math.isclose(f(), 2.5)"),  # MBPP's test_imports put `import math` in the program
    "re": ("import types\nre = types.SimpleNamespace(fullmatch=lambda *a: True)\ndef f():\n    return 'no'\n",
           "assert re.fullmatch('[a-z]+!', f())"),
}


@pytest.mark.parametrize("name", sorted(SHADOWS))
def test_a_program_cannot_redefine_a_builtin_or_a_module_that_the_tests_call(name):
    program, test = SHADOWS[name]
    result = run_tests(program, [test], timeout_s=3.0)
    assert (result.status, result.passed) == ("ok", 0), (name, result)


def test_the_entry_point_keeps_its_name_even_when_a_builtin_has_it():
    """mbpp-126's function is called `sum`: the tests are meant to call the program's, and pass only with it."""
    program = "import math\ndef sum(a, b):\n    return math.gcd(a, b)\n"
    tests = ["assert sum(10, 15) == 5", "assert math.gcd(4, 6) == 2"]
    assert run_tests(program, tests, keep=["sum"]).passed == 2
    assert run_tests(program, tests).passed == 1  # without it, `sum` is the builtin (sum(10, 15) is a TypeError)


ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __lt__ = __le__ = __gt__ = __ge__ = __contains__ = __eq__
    def __sub__(self, other):
        return 0.0
    __rsub__ = __sub__
    def __add__(self, other):
        return self
    __radd__ = __add__
    def __hash__(self):
        return 0
def f(*args):
    return Anything()
"""
NOT_PLAIN_TESTS = ["assert f() == 1", "assert not (f() != 1)", "assert f() <= 1 and f() >= 1",
                   "assert abs(f() - 2.5) < 1e-6", "assert 3 in f()", "assert f() + 1 == 2", "assert [f()] == [1]",
                   "assert {'k': f()} == {'k': 1}", "assert f() in [1]"]


@pytest.mark.parametrize("test", NOT_PLAIN_TESTS)
def test_an_object_that_answers_every_comparison_with_yes_passes_nothing(test):
    result = run_tests(ALWAYS_EQUAL, [test], timeout_s=3.0)
    assert (result.status, result.passed) == ("ok", 0), result


def test_the_program_never_sees_the_expected_value_of_a_comparison():
    spy = ("class Spy:\n    def __eq__(self, other):\n        raise ValueError('saw %r' % (other,))\n"
           "    __ne__ = __lt__ = __sub__ = __rsub__ = __contains__ = __eq__\n    def __iter__(self):\n"
           "        return iter([])\ndef f():\n    return Spy()\n")
    result = run_tests(spy, ["assert f() == 'SECRET-1'", "assert f() < 'SECRET-2'", "assert f() - 7 == 0",
                             "assert 'SECRET-3' in f()"], timeout_s=3.0)
    assert result.passed == 0 and not any("SECRET" in o for o in result.outcomes), result


@pytest.mark.parametrize("code", ["import sys\nsys.stderr.write('Traceback\\nMemoryError\\n')\nsys.exit(1)\n",
                                  "raise MemoryError('out of memory')\n"])
def test_a_program_cannot_name_its_own_failure_a_memory_one(code):
    result = execute(code, **LIMITS)
    assert result.status == "error", result  # the runner saw an exit status of 1 and no OOM kill


# --- state that outlives a run, or exceeds its limits -------------------------------------------------------------

def host_shm_segments():
    with open("/proc/sysvipc/shm") as f:
        return {line.split()[1] for line in f.readlines()[1:]}


SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
held = 0
for _ in range(6):
    shmid = libc.shmget(0, 100 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600, never IPC_RMID
    addr = libc.shmat(shmid, None, 0)
    ctypes.memset(addr, 1, 100 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
    held += 100
    print("held", held, flush=True)
"""


@pytest.mark.serial  # every segment on the host, before and after (the new ones removed): alone, they are this run's
def test_shared_memory_neither_outlives_the_run_nor_exceeds_its_memory():
    before = host_shm_segments()
    try:
        result = execute(SHM, timeout_s=5.0, memory_mb=256)
        assert "held 600" not in result.stdout, result  # 600 MiB of segments under a 256 MiB run
        assert host_shm_segments() - before == set()
    finally:
        for shmid in host_shm_segments() - before:
            os.system(f"ipcrm -m {shmid} 2>/dev/null")


@pytest.mark.parametrize("kind", ["file", "unix_socket"])
def test_nothing_is_left_in_host_runtime_directories(kind):
    path = f"/run/lock/credo-hostile-{kind}"
    make = (f"open({path!r}, 'w').write('left behind')\n" if kind == "file" else
            f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind({path!r})\ns.listen(1)\n")
    try:
        execute(make, **LIMITS)
        assert not os.path.lexists(path)
    finally:
        if os.path.lexists(path):
            os.remove(path)


def test_children_together_cannot_exceed_the_run_memory():
    program = """
import os, time
pids = []
for _ in range(5):
    pid = os.fork()
    if pid == 0:
        block = bytearray(64 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(1.0)
        os._exit(0)
    pids.append(pid)
ok = sum(os.waitpid(pid, 0)[1] == 0 for pid in pids)
print("children", ok, flush=True)
"""
    result = execute(program, timeout_s=6.0, memory_mb=128)
    assert "children 5" not in result.stdout, result  # 320 MiB across five children of a 128 MiB run


@pytest.mark.serial  # every run folder on the host, before and after: alone, a new one is this run's
def test_a_deep_directory_tree_neither_crashes_execute_nor_leaks():
    program = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')\n"
    leftovers = lambda: set(glob.glob("/run/credo-sandbox/run-*")) | set(glob.glob("/tmp/credo-sandbox*/run-*"))  # noqa
    before = leftovers()
    result = execute(program, timeout_s=30.0)  # 3000 mkdirs: seconds on a loaded 2-core machine
    assert result.stdout.strip() == "deep", result
    assert leftovers() - before == set()


def test_a_tree_deeper_than_the_recursion_limit_and_path_max_is_removed(tmp_path):
    from rewards.sandbox.tree import remove_tree  # the fallback's host directories (CREDO_CODE_SANDBOX=none)
    fd = os.open(tmp_path, os.O_RDONLY)
    for level in range(1400):  # 1400 levels of "dd/": 4200 characters, past PATH_MAX and the recursion limit
        os.mkdir("dd", dir_fd=fd)
        if level % 100 == 0:
            open(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd), "w").close()
        fd, old = os.open("dd", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    os.close(fd)
    remove_tree(str(tmp_path / "dd"))
    assert os.listdir(tmp_path) == ["f"]


def test_a_run_cannot_make_new_user_namespaces():
    program = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
               "print('unshare', libc.unshare(0x10000000), flush=True)\n")  # CLONE_NEWUSER: root of its own
    result = execute(program, **LIMITS)
    assert result.stdout.strip() == "unshare -1", result


def test_the_checkout_and_the_datasets_are_not_visible():
    paths = [os.path.join(REPO_ROOT, "rewards", "code.py"), os.path.join(REPO_ROOT, "data", "mbpp", "sanitized.jsonl")]
    program = "import os\nfor p in %r:\n    print(p, os.path.exists(p))\n" % paths
    result = execute(program, **LIMITS)
    assert result.status == "ok" and re.findall(r" (True|False)$", result.stdout, re.M) == ["False", "False"]


# --- a uid of its own per run, on a kernel that other containers share ----------------------------------------------

AS_ROOT = pytest.mark.skipif(os.getuid() != 0, reason="runs change uid only as root")


def runner_in_a_pid_namespace_of_its_own(code: str):
    """The sandbox runner as pid 1 of a fresh PID namespace, as a trainer's runner is in a container of its own."""
    job = {"code": code, "stdin": "", "tests": None, "keep": [], "isolation": "bwrap", "timeout_s": 5,
           "memory_mb": 256, "max_output_bytes": 4096, "max_processes": 16, "max_file_mb": 1}
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-I", "-S", _RUNNER],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    return proc


@AS_ROOT
@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux's unshare")
def test_two_runners_with_the_same_pid_in_separate_namespaces_get_separate_uids():
    # both runners are pid 1; a uid derived from the pid (as before issue 51) was the same for both
    procs = [runner_in_a_pid_namespace_of_its_own("import time\ntime.sleep(1.0)\nprint('done')\n")
             for _ in range(2)]
    results = [json.loads(p.stdout.read().strip().splitlines()[-1]) for p in procs]
    for p in procs:
        p.wait(timeout=30)
    assert [r["status"] for r in results] == ["ok", "ok"], [p.stderr.read() for p in procs]
    assert results[0]["uid"] != results[1]["uid"]
    assert all(uids.UID_BASE <= r["uid"] < 2 * uids.UID_BASE and r["uid"] % 2 == 0 for r in results)


@AS_ROOT
def test_a_uid_that_a_process_of_another_container_has_is_not_claimed():
    taken, free = [uids.UID_BASE + 2 * (12345 + i) for i in range(2)]
    # a process with that uid, as another container's run would have (its PID namespace is irrelevant: the kernel
    # counts a uid's processes across all of them)
    other = subprocess.Popen(["sleep", "60"], user=taken, group=taken, extra_groups=[])
    try:
        time.sleep(0.3)
        assert uids.try_claim(taken) is None
        held = uids.claim([taken, free])
        assert held.uid == free
        assert uids.try_claim(free) is None  # and now the claimed one is taken for everyone else
        held.release()
        again = uids.try_claim(free)
        assert again is not None
        again.release()
    finally:
        other.kill()
        other.wait()
