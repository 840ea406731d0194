"""Code verifier: run model-written programs in a sandbox (rewards/sandbox/) and score them on tests.

Isolation (bubblewrap, rewards/sandbox/bwrap.py): every program runs in fresh user, PID, IPC, network, UTS and
mount namespaces, as uid 65534 inside and its own unprivileged uid outside, with no new user namespaces, private
/proc, /dev and /tmp, its files on a size-limited tmpfs, and nothing of the host but /usr (and the interpreter's
prefix) read-only: no other run, no checkout, no datasets, no network. One cgroup per run (v1 memory + pids)
limits everything the run starts together, shared memory and children included; rlimits (CPU time, address
space, file size, open files, processes) and the output caps stay as the inner layer; the whole tree is killed at
the end. tests/rewards/test_sandbox_hostile.py attacks each of these.

Results that a program cannot fake (run_tests): the tests run in a second sandbox, in another interpreter, and
reach the program's names only through requests over a pipe whose replies decode to plain values or handles
(rewards/sandbox/wire.py), never to objects with the program's code in them. The tests see the genuine builtins and
standard modules whatever the program names its globals (only the names they are meant to call, `keep`, are the
program's), a returned value that is plain data is compared on the harness's side, and a program's object never
meets the test's data in the program (== with plain data is False; rewards/sandbox/harness.py). The harness alone
writes the result pipe, its line carries a token drawn per run, and any run status other than "ok" scores 0. A
stdin/stdout test is judged here, on the output that the runner read from the program's pipe
(rewards/code_cases.py). The tests are never in the program's view. What no harness can prevent, and stays
inherent: a program may hard-code the answers to tests it was shown in the prompt (use held-out tests), and two of
its own objects compare as it says.

Without bubblewrap `execute` refuses (SandboxUnavailable) unless CREDO_CODE_SANDBOX=none asks for the weaker
fallback (rlimits, own uid and network namespace when root; no mount, PID or IPC isolation between runs), which
warns once and is counted in sandbox_counts(); where no cgroup is writable the memory and process limits are per
process (rlimits) and that too warns once and is counted.
"""
import functools
import json
import os
import subprocess
import sys
import threading
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rewards.base import InfrastructureError
from rewards.code_cases import NOT_RUN, VERDICTS, held_out_feedback, shown_feedback, stdin_verdict, test_kind
from rewards.sandbox.bwrap import find_bwrap

_RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox", "runner.py")
STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "killed")
ISOLATIONS = ("bwrap", "none")
_counts, _counts_lock = Counter(), threading.Lock()


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot run on this machine."""


@dataclass
class ExecResult:
    status: str        # one of STATUSES
    returncode: int
    stdout: str        # capped
    stderr: str        # capped
    wall_s: float
    isolation: str = ""  # "bwrap+cgroup" normally; "+rlimits": limits per process; "none+...": no bubblewrap


def sandbox_counts() -> dict:
    """Runs so far in this process by isolation ("bwrap+cgroup", "bwrap+rlimits", "none+cgroup", ...)."""
    with _counts_lock:
        return dict(_counts)


def requested_isolation() -> str:
    choice = os.environ.get("CREDO_CODE_SANDBOX", "bwrap")
    if choice not in ISOLATIONS:
        raise SandboxUnavailable(f"CREDO_CODE_SANDBOX={choice!r}: expected one of {', '.join(ISOLATIONS)}")
    return choice


@functools.lru_cache(maxsize=None)
def _checked(isolation: str) -> str:
    """Refuse clearly, once, where bubblewrap is missing or cannot make namespaces here (else every program would
    silently score 0 with a bwrap error on its stderr)."""
    if isolation == "none":
        warnings.warn("CREDO_CODE_SANDBOX=none: programs run WITHOUT bubblewrap (no mount, PID or IPC isolation "
                      "between runs); a policy can learn to attack its siblings. Counted in sandbox_counts().",
                      RuntimeWarning, stacklevel=3)
        return isolation
    if find_bwrap() is None:
        raise SandboxUnavailable("the code sandbox needs bubblewrap: `apt-get install -y bubblewrap` "
                                 "(scripts/setup.sh does it as root), or CREDO_CODE_SANDBOX=none for a weaker fallback")
    probe_job = {"code": "print('ok')", "stdin": "", "tests": None, "isolation": isolation, "timeout_s": 10,
                 "memory_mb": 256, "max_output_bytes": 4096, "max_processes": 8, "max_file_mb": 1}
    probe = _result(_run_job(probe_job, 10))
    if probe.status != "ok" or probe.stdout.strip() != "ok":
        raise SandboxUnavailable(f"bubblewrap cannot start a sandbox here ({probe.stderr.strip()[-300:]}); "
                                 "it needs user namespaces (sysctl kernel.unprivileged_userns_clone=1 or root)")
    return isolation


def _count(isolation: str):
    with _counts_lock:
        first = isolation not in _counts
        _counts[isolation] += 1
    if first and isolation.endswith("+rlimits"):
        warnings.warn("no writable cgroup (v1 memory + pids) for the code sandbox: memory_mb and max_processes are "
                      "limits PER PROCESS (rlimits); a run's children together can exceed them. Counted in "
                      "sandbox_counts().", RuntimeWarning, stacklevel=3)


def _run_job(job: dict, timeout_s: float) -> ExecResult:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if "CREDO_SANDBOX_PYTHON" in os.environ:
        env["CREDO_SANDBOX_PYTHON"] = os.environ["CREDO_SANDBOX_PYTHON"]
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", _RUNNER], input=json.dumps(job), cwd="/", env=env,
                              capture_output=True, text=True, timeout=timeout_s + 15, start_new_session=True)
    except subprocess.TimeoutExpired:
        return ExecResult("timeout", -9, "", "sandbox runner did not finish", timeout_s + 15, job["isolation"])
    try:
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        # The runner (the trusted supervisor outside the program's sandbox) wrote no verdict: a failure outside the
        # response, retried once by the caller (--reward_retries); failing again, it is the response's and scores 0
        raise InfrastructureError(f"the code sandbox's runner failed (exit {proc.returncode}): "
                                  f"{proc.stderr[-2000:]}") from None
    return result


def _job(code: str, stdin: str, tests, timeout_s: float, memory_mb: int, max_output_bytes: int, max_processes: int,
         max_file_mb: int, keep=()) -> dict:
    return {"code": code, "stdin": stdin, "tests": tests, "keep": sorted(keep),
            "isolation": _checked(requested_isolation()),
            "timeout_s": timeout_s, "memory_mb": memory_mb, "max_output_bytes": max_output_bytes,
            "max_processes": max_processes, "max_file_mb": max_file_mb}


def _result(raw) -> ExecResult:
    if isinstance(raw, ExecResult):
        return raw
    _count(raw["isolation"])
    return ExecResult(raw["status"], raw["returncode"], raw["stdout"], raw["stderr"], raw["wall_s"], raw["isolation"])


def execute(code: str, *, stdin: str = "", timeout_s: float = 5.0, memory_mb: int = 1024,
            max_output_bytes: int = 65536, max_processes: int = 64, max_file_mb: int = 16) -> ExecResult:
    """Run `code` as a Python program in the sandbox and return how it ended."""
    job = _job(code, stdin, None, timeout_s, memory_mb, max_output_bytes, max_processes, max_file_mb)
    return _result(_run_job(job, timeout_s))


@dataclass
class TestResult:
    passed: int
    total: int
    score: float       # passed / total; 0 whenever the run of the harness's tests does not end "ok"
    feedback: str      # the first failing test (a held-out one by number) and how it failed, truncated ("" if none)
    status: str        # the program's run's status; of stdin tests, the first that was not "ok" (else "ok")
    outcomes: list = None  # per test: None if it passed, else how it failed (what a held-out test's feedback hides)


def run_tests(program: str, tests, feedback_chars: int = 500, *, shown: int = None, keep=(), timeout_s: float = 5.0,
              memory_mb: int = 1024, max_output_bytes: int = 65536, max_processes: int = 64,
              max_file_mb: int = 16) -> TestResult:
    """Run `program` on each test and count the passes. A test is Python source (e.g. an assert, run in the harness's
    own sandbox against the program's names), a stdin/stdout test {"stdin", "stdout"} (a run of its own per test)
    or a call test {"call", "args", "returns"} (rewards/code_cases.py). `shown`: only the first `shown` tests were
    shown to the model (None: all were); the feedback quotes a failing test among those, and of a held-out one gives
    its number (and, for Python source, its error) only, so that multi-turn feedback never hands the model a test
    it was not shown. `keep`: the program's names that the tests are meant to call although a builtin or a standard
    module has that name (the entry point); any other such name of the program is not the tests'
    (rewards/sandbox/harness.py). timeout_s: per run (the harness's tests together; each stdin test alone)."""
    tests = [tests] if isinstance(tests, str) else list(tests)
    if not tests:
        raise ValueError("run_tests needs at least one test")
    kinds = [test_kind(t) for t in tests]
    limits = (timeout_s, memory_mb, max_output_bytes, max_processes, max_file_mb)
    outcomes, outputs, status = [None] * len(tests), [("", "")] * len(tests), "ok"
    in_harness = [i for i, kind in enumerate(kinds) if kind != "stdin"]
    if in_harness:
        job = _job(program, "", [tests[i] for i in in_harness], *limits, keep)
        raw = _run_job(job, timeout_s)
        result = _result(raw)
        found, why = (raw.get("tests"), raw.get("tests_error", "")) if isinstance(raw, dict) else (None, "")
        if result.status != "ok" or found is None:  # a run that did not end cleanly proves nothing
            lines = result.stderr.strip().splitlines()
            reason = (lines[-1] if lines else why or result.status) if result.status != "ok" else why
            return TestResult(0, len(tests), 0.0, f"program {result.status}: {reason}"[:feedback_chars],
                              result.status, [f"program {result.status}"] * len(tests))
        for i, outcome in zip(in_harness, found):
            outcomes[i] = outcome
    by_stdin = [i for i, kind in enumerate(kinds) if kind == "stdin"]
    if by_stdin:
        status = _run_stdin_tests(program, [tests[i] for i in by_stdin], limits, by_stdin, outcomes, outputs)
    passed = sum(o is None for o in outcomes)
    first = next((i for i, o in enumerate(outcomes) if o is not None), None)
    if first is None:
        feedback = ""
    elif shown is None or first < shown:
        feedback = shown_feedback(tests[first], outcomes[first], *outputs[first])
    else:
        feedback = held_out_feedback(tests[first], first, len(tests), outcomes[first])
    return TestResult(passed, len(tests), passed / len(tests), feedback[:feedback_chars], status, outcomes)


def _run_stdin_tests(program: str, tests: list, limits: tuple, positions: list, outcomes: list, outputs: list) -> str:
    """Each stdin test in a fresh sandbox of its own (one runner for all); each judged here by its output. Fills
    outcomes and outputs ((stdout, last error line)) at `positions`; returns the first status that was not "ok"
    (else "ok")."""
    job = {**_job(program, "", None, *limits), "stdins": [t["stdin"] for t in tests]}
    raw = _run_job(job, (limits[0] + 2) * len(tests))
    cases = raw.get("cases") if isinstance(raw, dict) else None
    if cases is None:  # the runner itself failed: every test fails with its status
        result = _result(raw)
        for i in positions:
            outcomes[i] = VERDICTS.get(result.status, result.status)
        return result.status
    status = "ok"
    for n, i in enumerate(positions):
        if n >= len(cases):
            outcomes[i] = NOT_RUN
            continue
        result = _result(cases[n])
        status = result.status if status == "ok" else status
        error = result.stderr.strip().splitlines()[-1:] if result.status != "ok" else []
        outcomes[i], outputs[i] = stdin_verdict(cases[n], tests[n]["stdout"]), (result.stdout, "".join(error))
    return status


def run_many(jobs: list, workers: int = 2, **limits) -> list:
    """run_tests over (program, tests) or (program, tests, keywords) jobs in parallel (--code_workers); keywords
    (e.g. shown, keep) go to run_tests with `limits`. Results in input order."""
    def one(job):
        return run_tests(job[0], job[1], **(job[2] if len(job) > 2 else {}), **limits)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, jobs))
