"""The sandbox's hostile programs on the stdin/stdout path (#49 item 4): standard input is a new way in, so a
program's input must reach neither another run (a sibling, or the run of the next input) nor the host, the expected
output must be nowhere in its view, and the ways to fake a result that tests/rewards/test_sandbox_hostile.py tries
must fail here too."""
import glob
import os
import time

import pytest

from rewards.code import execute, run_tests
from tests.rewards.test_sandbox_hostile import concurrently

LIMITS = dict(timeout_s=3.0, memory_mb=128, max_processes=16)
SUM = "print(sum(map(int, input().split())))\n"
SUM_TESTS = [{"stdin": "1 2\n", "stdout": "3\n"}, {"stdin": "5 5\n", "stdout": "10\n"}]


KEEP_AND_RECALL = """
import glob, os, re, sys
mine = sys.stdin.read()
found = []
for pattern in ("/tmp/*", "/work/*", "/dev/shm/*", os.path.expanduser("~/*"), "/run/lock/*", "/var/tmp/*"):
    for path in glob.glob(pattern):
        try:
            found.append(open(path).read())
        except OSError:
            pass
for place in ("/tmp/kept", "/dev/shm/kept", "/work/kept", "/var/tmp/kept", "/run/lock/kept"):
    try:
        open(place, "w").write(mine)
    except OSError:
        pass
print(" ".join(re.findall("SECRET-[0-9]+", " ".join(found))) or "nothing")  # main.py itself names no input
"""


def test_one_input_never_reaches_the_run_of_the_next():
    tests = [{"stdin": f"SECRET-{i}\n", "stdout": "nothing\n"} for i in range(3)]
    result = run_tests(KEEP_AND_RECALL, tests, **LIMITS)
    assert (result.passed, result.status) == (3, "ok"), result  # each run found nothing of the one before


PEEK = """
import glob, os, time
end = time.time() + 2.5
while time.time() < end:
    for path in glob.glob("/proc/[0-9]*/fd/*") + glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ") \\
            + glob.glob("/run/credo-sandbox/*/*") + glob.glob("/tmp/credo-sandbox*/*/*") + glob.glob("/dev/shm/*"):
        try:
            with open(path, "rb") as f:
                if b"SECRET-INPUT" in f.read(1 << 20):
                    print("FOUND", path, flush=True)
        except OSError:
            pass
print("looked", flush=True)
"""


def test_a_sibling_cannot_read_the_input_of_a_running_program():
    slow_echo = "import sys, time\ndata = sys.stdin.read()\ntime.sleep(1.5)\nprint(len(data))\n"
    attacker, victim = concurrently(lambda: execute(PEEK, **LIMITS),
                                    lambda: run_tests(slow_echo, [{"stdin": "SECRET-INPUT\n", "stdout": "13\n"}],
                                                      **LIMITS), 0.2)
    assert "looked" in attacker.stdout and "FOUND" not in attacker.stdout, attacker.stdout
    assert victim.passed == 1, victim


def host_files_with(marker: bytes) -> list:
    found = []
    for pattern in ("/tmp/**", "/run/credo-sandbox/**", "/dev/shm/**"):
        for path in glob.glob(pattern, recursive=True):
            try:
                if os.path.isfile(path) and os.path.getsize(path) < (1 << 20):
                    with open(path, "rb") as f:
                        if marker in f.read():
                            found.append(path)
            except OSError:
                pass
    return found


def test_an_input_leaves_nothing_on_the_host():
    marker = f"SECRET-HOST-{os.getpid()}-{time.time_ns()}"
    result = run_tests("import sys\nprint(sys.stdin.read().strip())\n", [{"stdin": marker + "\n", "stdout": marker}],
                       **LIMITS)
    assert result.passed == 1
    assert host_files_with(marker.encode()) == []


LOOK_FOR_THE_ANSWER = """
import glob, os, re, sys
sys.stdin.read()
seen = " ".join(sys.argv) + " ".join(f"{k}={v}" for k, v in os.environ.items())
for path in glob.glob("/work/**", recursive=True) + glob.glob("/tmp/**", recursive=True) + \\
        glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/self/fd/*"):
    try:
        with open(path, "rb") as f:
            seen += f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        pass
match = re.search(r"ANSWER-\\d+", seen)
print(match.group(0) if match else "not found")
"""


def test_the_expected_output_is_nowhere_in_the_programs_view():
    result = run_tests(LOOK_FOR_THE_ANSWER, [{"stdin": "question\n", "stdout": "ANSWER-4242\n"}], **LIMITS)
    assert (result.passed, result.status) == (0, "ok"), result
    assert "your output\nnot found" in result.feedback


# Programs that print the right answer and then end badly: the answer counts only from a run that ends "ok"
ANSWER = "print(sum(map(int, input().split())), flush=True)\n"
ENDS_BADLY = {
    "hang": ANSWER + "while True:\n    pass\n",
    "flood": ANSWER + "import sys\nwhile True:\n    sys.stderr.write('x' * 4096)\n",  # stdout stays the answer
    "exit_1": ANSWER + "import sys\nsys.exit(1)\n",
    "kill_itself": ANSWER + "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n",
    "child_lingers": ANSWER + "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\n",
}


@pytest.mark.parametrize("name", sorted(ENDS_BADLY))
def test_a_right_answer_from_a_run_that_ends_badly_counts_for_nothing(name):
    result = run_tests(ENDS_BADLY[name], SUM_TESTS[:1], timeout_s=1.0, max_output_bytes=20_000)
    if name == "child_lingers":  # the program itself ended ok; its child is killed with the run
        assert result.passed == 1
    else:
        assert result.passed == 0, (name, result)


def test_after_a_run_out_of_time_the_other_inputs_are_not_run():
    start = time.perf_counter()
    result = run_tests("import time\ntime.sleep(60)\n", SUM_TESTS * 3, timeout_s=1.0)
    assert time.perf_counter() - start < 8  # one timeout, not six
    assert result.outcomes[0] == "time limit exceeded" and result.passed == 0
    assert all(o.startswith("not run") for o in result.outcomes[1:])


def test_a_sibling_stays_contained_against_a_stdin_tested_run():
    kill_all = ("import os, time\nend = time.time() + 2\nwhile time.time() < end:\n    try:\n        os.kill(-1, 9)\n"
                "    except OSError:\n        pass\n")
    slow_sum = "import time\ntime.sleep(0.5)\n" + SUM
    _, victim = concurrently(lambda: execute(kill_all, **LIMITS), lambda: run_tests(slow_sum, SUM_TESTS, **LIMITS),
                             0.2)
    assert (victim.passed, victim.status) == (2, "ok"), victim
