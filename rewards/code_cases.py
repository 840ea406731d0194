"""The three forms of a code test, how a program's output is judged against one, and what feedback may say.

A test given to rewards.code.run_tests is one of:
- a string of Python (an assert, HumanEval's check()): run in the test harness's sandbox against the program's
  names (rewards/sandbox/harness.py);
- {"stdin": str, "stdout": str}: a standard input/output test. The program runs as a script with that input on its
  standard input, in a sandbox of its own (no other test's input is in it), and the runner reads what it writes;
  the output is judged HERE, on the trainer's side, never by the program;
- {"call": name, "args": [...], "returns": value}: a function-call test (LiveCodeBench's "functional" type):
  the harness calls `Solution().name(*args)` if the program defines a class Solution, else `name(*args)`, and
  compares the returned value as data on its side (a tuple counts as a list, as LiveCodeBench's grade_call_based
  does).

The output comparison is LiveCodeBench's grade_stdio (lcb_runner/evaluation/testing_util.py,
LiveCodeBench/LiveCodeBench at 28fef95, `get_stripped_lines` and `convert_line_to_decimals`): both texts are
stripped and split on "\\n", each line stripped; the line counts must agree, and each pair of lines must be equal,
or else both split on whitespace into the same list of Decimals ("1.50 2" equals "1.5 2"; not 1e-9 tolerant).

Feedback (credo's reading): a failing test the prompt showed is quoted (input, expected and actual output, each
truncated as LiveCodeBench's truncatefn does, to 300 characters); a failing held-out test of the stdin or call form
is named by its number and its verdict only ("wrong answer", "runtime error", "time limit exceeded", ...): no
output, no error text, since the program's output or its exception's name can carry the hidden input.
"""
from decimal import Decimal, InvalidOperation

VERDICTS = {"error": "runtime error", "timeout": "time limit exceeded", "memory": "memory limit exceeded",
            "output_limit": "output limit exceeded", "killed": "runtime error (killed by a signal)"}
NOT_RUN = "not run (an earlier test ran out of time)"


def test_kind(test) -> str:
    """"python", "stdin" or "call"; ValueError naming what is wrong with any other test."""
    if isinstance(test, str):
        return "python"
    if isinstance(test, dict) and set(test) == {"stdin", "stdout"}:
        if not all(isinstance(test[k], str) for k in test):
            raise ValueError("a stdin test's 'stdin' and 'stdout' must be strings")
        return "stdin"
    if isinstance(test, dict) and set(test) == {"call", "args", "returns"}:
        if not (isinstance(test["call"], str) and test["call"].isidentifier() and isinstance(test["args"], list)):
            raise ValueError("a call test needs 'call' (a function name) and 'args' (a list)")
        return "call"
    raise ValueError(f"a test is Python source, {{'stdin', 'stdout'}} or {{'call', 'args', 'returns'}}; got "
                     f"{str(test)[:80]}")


def stripped_lines(text: str) -> list:
    """LiveCodeBench's get_stripped_lines: no empty list for a trailing newline, each line stripped."""
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str):
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def _same_numbers(mine: list, theirs: list) -> bool:
    """Two lines' Decimals equal. A comparison that raises is a mismatch, never the scorer's crash: a program that
    prints `sNaN` (a signalling NaN, which Decimal refuses to compare: InvalidOperation) prints a wrong answer."""
    try:
        return mine == theirs
    except ArithmeticError:  # decimal.InvalidOperation is one
        return False


def stdout_matches(got: str, expected: str) -> bool:
    """LiveCodeBench's grade_stdio comparison of one output (module docstring)."""
    got_lines, want_lines = stripped_lines(got), stripped_lines(expected)
    if len(got_lines) != len(want_lines):
        return False
    for mine, theirs in zip(got_lines, want_lines):
        if mine == theirs:
            continue
        mine_d, theirs_d = _decimals(mine), _decimals(theirs)
        if mine_d is None or theirs_d is None or not _same_numbers(mine_d, theirs_d):
            return False
    return True


def stdin_verdict(case: dict, expected: str):
    """None when the run of one stdin test passed, else its verdict: a run that did not exit 0 fails whatever it
    printed (credo's reading; LiveCodeBench lets a SystemExit pass)."""
    if case["status"] != "ok":
        return VERDICTS.get(case["status"], case["status"])
    return None if stdout_matches(case["stdout"], expected) else "wrong answer"


def truncate(text, length: int = 300) -> str:
    """LiveCodeBench's truncatefn: the head and tail of a long text."""
    text = text if isinstance(text, str) else str(text)
    if len(text) <= length:
        return text
    return text[:length // 2] + "...(truncated) ..." + text[-length // 2:]


def shown_feedback(test, outcome: str, got: str = "", error: str = "") -> str:
    """What a failing test the prompt showed says: the test itself and how it failed (for a stdin test, the output
    and the last line of the error, if any)."""
    kind = test_kind(test)
    if kind == "python":
        return f"failed: {test.strip()}\n{outcome}"
    if kind == "call":
        args = ", ".join(repr(a) for a in test["args"])
        return f"failed: {test['call']}({truncate(args)}) should return {truncate(repr(test['returns']))}\n{outcome}"
    text = (f"failed ({outcome}) on the input\n{truncate(test['stdin']).rstrip()}\nexpected output\n"
            f"{truncate(test['stdout']).rstrip()}\nyour output\n{truncate(got).rstrip()}")
    return text + (f"\nerror: {truncate(error)}" if error else "")


def held_out_feedback(test, index: int, total: int, outcome: str) -> str:
    """What a failing held-out test says: its number, and for the Python form its error as before (the assert
    tests' own message, which may quote an argument); for the stdin and call forms the verdict alone."""
    head = f"failed: held-out test {index + 1} of {total} (not shown)"
    if test_kind(test) == "python":
        return f"{head}\n{outcome}"
    return f"{head}: {outcome.split(':', 1)[0]}"
