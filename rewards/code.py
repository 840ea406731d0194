"""Code verifier: run model-written programs in a sandbox (rewards/sandbox_runner.py) and score them on tests.

What is enforced (tests/test_rewards_code.py shows each): wall timeout and CPU-time limit; address-space limit;
process limit; file-size limit; capped output; a private temporary working directory removed afterwards; a
scrubbed environment; no network (a fresh network namespace; where the kernel refuses one, socket creation is
refused inside the interpreter instead); the whole process tree, setsid() escapees included, killed afterwards.
Run as root (as here), the program runs as `nobody`, so it cannot write the repository or signal the trainer,
and it gets private, empty /tmp, /var/tmp and /dev/shm (a mount namespace) that vanish with it. Not enforced: a
program can read world-readable files; without root the user, mount and network isolation degrade as noted in
sandbox_runner.py; and the tests run in the program's own process, so a program written to fake results could.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "killed")
NOBODY = 65534
# Working directories live outside /tmp (the program gets a private /tmp) in a place `nobody` can reach whatever
# the permissions of the checkout's parents: /run when root, else the usual temporary directory.
SANDBOX_ROOT = "/run/credo-sandbox" if os.getuid() == 0 and os.path.isdir("/run") else \
    os.path.join(tempfile.gettempdir(), "credo-sandbox")


@dataclass
class ExecResult:
    status: str        # one of STATUSES
    returncode: int
    stdout: str        # capped
    stderr: str        # capped
    wall_s: float


def execute(code: str, *, stdin: str = "", timeout_s: float = 5.0, memory_mb: int = 1024,
            max_output_bytes: int = 65536, max_processes: int = 64, max_file_mb: int = 16) -> ExecResult:
    """Run `code` as a Python program in the sandbox and return how it ended."""
    os.makedirs(SANDBOX_ROOT, mode=0o711, exist_ok=True)  # not under /tmp: the program gets a private /tmp
    workdir = tempfile.mkdtemp(prefix="run-", dir=SANDBOX_ROOT)
    try:
        with open(os.path.join(workdir, "main.py"), "w") as f:
            f.write(code)
        with open(os.path.join(workdir, "stdin.txt"), "w") as f:
            f.write(stdin)
        if os.getuid() == 0:  # the program runs as nobody: give it its working directory and nothing else
            for name in ("", "main.py", "stdin.txt"):
                os.chown(os.path.join(workdir, name), NOBODY, NOBODY)
        job = {"dir": workdir, "timeout_s": timeout_s, "memory_mb": memory_mb, "max_output_bytes": max_output_bytes,
               "max_processes": max_processes, "max_file_mb": max_file_mb}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": _REPO_ROOT}
        try:
            proc = subprocess.run([sys.executable, "-m", "rewards.sandbox_runner", json.dumps(job)], cwd=_REPO_ROOT,
                                  env=env, capture_output=True, text=True, timeout=timeout_s + 15,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            return ExecResult("timeout", -9, "", "sandbox runner did not finish", timeout_s + 15)
        try:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            return ExecResult("killed", proc.returncode, "", f"sandbox runner failed: {proc.stderr[-2000:]}", 0.0)
        return ExecResult(**result)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class TestResult:
    passed: int
    total: int
    score: float       # passed / total
    feedback: str      # the first failing test and its error, truncated ("" when all pass)
    status: str        # the ExecResult status of the run


_MARKER = "__CREDO_TEST_RESULTS__"
_HARNESS = '''

import json as _credo_json
_credo_results = []
for _credo_src in {tests!r}:
    try:
        exec(compile(_credo_src, "<test>", "exec"), globals())
        _credo_results.append(None)
    except BaseException as _credo_exc:
        _credo_results.append(type(_credo_exc).__name__ + ": " + str(_credo_exc))
print({marker!r} + _credo_json.dumps(_credo_results), flush=True)
'''


def run_tests(program: str, tests, feedback_chars: int = 500, **limits) -> TestResult:
    """Run `program` then each test (a string of Python, e.g. an assert) in the sandbox; count the passes."""
    tests = [tests] if isinstance(tests, str) else list(tests)
    if not tests:
        raise ValueError("run_tests needs at least one test")
    result = execute(program + _HARNESS.format(tests=tests, marker=_MARKER), **limits)
    outcomes = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(_MARKER):
            outcomes = json.loads(line[len(_MARKER):])
            break
    if outcomes is None or len(outcomes) != len(tests):  # the program never reached the tests
        reason = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.status
        return TestResult(0, len(tests), 0.0, f"program {result.status}: {reason}"[:feedback_chars], result.status)
    passed = sum(o is None for o in outcomes)
    first_fail = next(((t, o) for t, o in zip(tests, outcomes) if o is not None), None)
    feedback = "" if first_fail is None else f"failed: {first_fail[0].strip()}\n{first_fail[1]}"[:feedback_chars]
    return TestResult(passed, len(tests), passed / len(tests), feedback, result.status)


def run_many(jobs: list, workers: int = 2, **limits) -> list:
    """run_tests over (program, tests) pairs in parallel (--code_workers); results in input order."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda job: run_tests(*job, **limits), jobs))
