"""Every HumanEval and MBPP (sanitized) reference solution passes through the sandbox, as the code env runs it (its
program, tests, shown count and the names the tests call: envs/code_tasks.py); a `pass` body fails."""
import ast
import json
import os

import pytest

from envs.code_env import CodeVerifier
from rewards.code import run_many
from tests.helpers import REPO_ROOT

# Some reference solutions are slow by design (mbpp-123 sums divisors up to 9999): a generous limit keeps a busy CI
# machine from turning a correct solution into a timeout.
LIMITS = dict(timeout_s=30)
# A run's two sandboxes start side by side (about 75 ms of CPU in 70 ms alone), but each run also waits on process
# start-ups and bubblewrap's namespaces: four at once fill two cores' gaps that two leave (41 vs 48 ms a run here).
WORKERS = 4


def check_all(good_jobs: list, bad_jobs: list):
    """Every reference job and every `pass`-body job, each in its own sandboxed run, in one batch (the pool stays
    full across the two halves); the two lists of results."""
    results = run_many(good_jobs + bad_jobs, workers=WORKERS, **LIMITS)
    return results[:len(good_jobs)], results[len(good_jobs):]


def rows(path):
    with open(os.path.join(REPO_ROOT, "data", path)) as f:
        return [json.loads(line) for line in f]


def humaneval_job(row, body):
    return CodeVerifier.program_and_tests(body, row)


def pass_bodies(code: str) -> str:
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [ast.Pass()]
    return ast.unparse(tree)


def mbpp_job(row, code):
    return CodeVerifier.program_and_tests(code, row)


def calls_reserved_names(row) -> bool:
    """Does a test of this row name a builtin or a standard module (set, sorted, math, ...)? The harness gives those
    names to the tests as the genuine ones, not the program's, unless they are the entry point (mbpp-126's sum)."""
    import builtins
    import sys
    reserved = set(dir(builtins)) | set(sys.stdlib_module_names)
    tests = row["test"] if "test" in row else "\n".join(row["test_list"])
    return any(isinstance(n, ast.Name) and n.id in reserved for n in ast.walk(ast.parse(tests)))


def test_the_rows_whose_tests_call_builtins_or_modules_pass_with_their_reference_solutions():
    """The quick subset of the two slow tests below: 20 MBPP and 17 HumanEval rows (issue 51 counts mbpp-126,
    whose function is `sum`, apart from the other 19)."""
    mbpp = [r for r in rows("mbpp/sanitized.jsonl") if calls_reserved_names(r)]
    humaneval = [r for r in rows("humaneval/test.jsonl") if calls_reserved_names(r)]
    assert (len(mbpp), len(humaneval)) == (20, 17)
    results = run_many([mbpp_job(r, r["code"]) for r in mbpp] +
                       [humaneval_job(r, r["canonical_solution"]) for r in humaneval], workers=WORKERS, **LIMITS)
    assert [r["id"] for r, res in zip(mbpp + humaneval, results) if res.score != 1.0] == []


@pytest.mark.slow
def test_humaneval_canonical_solutions_pass_and_pass_bodies_fail():
    data = rows("humaneval/test.jsonl")
    assert len(data) == 164
    good, bad = check_all([humaneval_job(r, r["canonical_solution"]) for r in data],
                          [humaneval_job(r, "    pass\n") for r in data])
    assert len(good) == len(bad) == len(data)
    assert [r["id"] for r, res in zip(data, good) if res.score != 1.0] == []
    assert [r["id"] for r, res in zip(data, bad) if res.score != 0.0] == []


@pytest.mark.slow
def test_mbpp_reference_solutions_pass_and_pass_bodies_fail():
    data = rows("mbpp/sanitized.jsonl")
    assert len(data) == 427
    good, bad = check_all([mbpp_job(r, r["code"]) for r in data], [mbpp_job(r, pass_bodies(r["code"])) for r in data])
    assert len(good) == len(bad) == len(data)
    assert [r["id"] for r, res in zip(data, good) if res.score != 1.0] == []
    assert [r["id"] for r, res in zip(data, bad) if res.score == 1.0] == []
