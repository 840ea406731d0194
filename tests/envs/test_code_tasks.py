"""LiveCodeBench's row layout in the code env (#49 item 4): its prompt, its stdin/stdout and functional tests scored
through the sandbox, the private tests held out of prompt and feedback, and bad rows named by file and line.

tests/data/lcb_style.jsonl holds five small problems written for these tests in LiveCodeBench's own layout (three
stdin/stdout, two functional; one row's private tests in the release's compressed form); LiveCodeBench itself is
user-supplied data. The reference solutions below were written with them."""
import base64
import json
import os
import pickle
import zlib

import pytest

from envs import make_env
from envs.code_tasks import LCB_IMPORTS, LCB_SYSTEM, BadCodeRow, check_row, layout, task
from rewards.code_cases import stdout_matches
from rl.rollout.data import DataError, load_rows
from tests.helpers import REPO_ROOT

LCB_FILE = os.path.join(REPO_ROOT, "tests", "data", "lcb_style.jsonl")
with open(LCB_FILE) as _f:
    ROWS = {row["question_id"]: row for row in map(json.loads, _f)}
SOLUTIONS = {
    "credo_sum": "n = int(input())\nprint(sum(map(int, input().split())))\n",
    "credo_reverse": "import sys\nprint(' '.join(sys.stdin.readline().split()[::-1]))\n",
    "credo_mean": "n = int(input())\nxs = list(map(int, input().split()))\nprint(f'{sum(xs) / n:.2f}')\n",
    "credo_add": "class Solution:\n    def addTwo(self, a: int, b: int) -> int:\n        return a + b\n",
    "credo_pair": "class Solution:\n    def minMax(self, nums: List[int]) -> List[int]:\n        return min(nums), max(nums)\n",
}


def lcb_env(max_turns=2):
    return make_env("code", prompt_key="question_content", answer_key="public_test_cases", max_turns=max_turns)


def private_cases(row):
    """The row's private cases as LiveCodeBench's loader reads them (JSON, else base64(zlib(pickle(JSON))))."""
    try:
        return json.loads(row["private_test_cases"])
    except ValueError:
        return json.loads(pickle.loads(zlib.decompress(base64.b64decode(row["private_test_cases"]))))


@pytest.mark.parametrize("lines_a,lines_b,same", [
    ("6\n", "6", True), ("  6  \n\n", "6", True), ("1 2\n3\n", "1 2\n3", True),
    ("1.50\n", "1.5", True), ("1.5000 2\n", "1.5 2.0", True), ("1e2", "100", True),
    ("1 2", "1  2", True),  # one line split on whitespace: the same list of Decimals
    ("6\n7", "6", False), ("1.33", "1.333", False), ("abc", "abd", False), ("a\n\nb", "a\nb", False),
    ("50000000000000000", "50000000000000001", False),  # grade_stdio's own comment: exact, not np.isclose
])
def test_outputs_compare_as_livecodebench_s_grade_stdio_does(lines_a, lines_b, same):
    assert stdout_matches(lines_a, lines_b) is same


def test_livecodebench_rows_open_with_its_own_prompt_and_hold_out_the_private_tests():
    stdin_task, call_task = task(ROWS["credo_sum"]), task(ROWS["credo_add"])
    assert layout(ROWS["credo_sum"]) == "livecodebench"
    system, user = stdin_task.messages
    assert system == {"role": "system", "content": LCB_SYSTEM}
    assert user["content"].startswith("### Question:\nYou are given N") and "# YOUR CODE HERE" in user["content"]
    assert user["content"].endswith("### Answer: (use the provided format with backticks)\n\n")
    assert "def addTwo(self, a: int, b: int)" in call_task.messages[1]["content"]
    assert stdin_task.prefix == LCB_IMPORTS + "\n" and stdin_task.shown == 1 and len(stdin_task.tests) == 4
    assert stdin_task.tests[0] == {"stdin": "3\n1 2 3\n", "stdout": "6\n"}
    assert call_task.tests[1] == {"call": "addTwo", "args": [-4, 4], "returns": 0}
    assert call_task.keep == ("Solution", "addTwo")
    for row in ROWS.values():  # the opening chat does not depend on the private tests at all
        assert task(row).messages == task(dict(row, private_test_cases="[]")).messages


@pytest.mark.parametrize("question_id", sorted(SOLUTIONS))
def test_a_correct_solution_scores_one_and_a_wrong_one_hears_only_of_public_tests(question_id):
    row = ROWS[question_id]
    env = lcb_env()
    env.reset(row)
    right = env.step(f"```python\n{SOLUTIONS[question_id]}```")
    assert (right.score, right.done) == (1.0, True)
    # wrong only on the private tests: it hard-codes the public example's answer
    public = json.loads(row["public_test_cases"])[0]
    if public["testtype"] == "stdin":
        cheat = f"print({public['output'].strip()!r})\n"
    else:
        cheat = (f"class Solution:\n    def {json.loads(row['metadata'])['func_name']}(self, *args):\n"
                 f"        return {json.loads(public['output'])!r}\n")
    env.reset(row)
    wrong = env.step(f"```python\n{cheat}```")
    assert wrong.score == pytest.approx(1 / (1 + len(private_cases(row))))
    total = 1 + len(private_cases(row))  # the verdict alone: no input, output or error of a private test
    assert wrong.observation[0]["content"] == (f"Some tests failed.\nfailed: held-out test 2 of {total} (not shown): "
                                               "wrong answer\nFix the code.")


def test_a_failing_public_test_is_quoted_with_its_input_expected_and_actual_output():
    env = lcb_env()
    env.reset(ROWS["credo_sum"])
    feedback = env.step("```python\nprint(input())\n```").observation[0]["content"]
    assert "on the input\n3\n1 2 3\nexpected output\n6\nyour output\n3" in feedback


def test_a_compressed_private_field_is_read_and_a_pickle_with_code_in_it_is_refused(tmp_path):
    row = ROWS["credo_reverse"]
    assert not row["private_test_cases"].startswith("[")  # the release's compressed form
    assert len(task(row).tests) == 1 + 3

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    evil = dict(row, private_test_cases=base64.b64encode(zlib.compress(pickle.dumps(Boom()))).decode())
    with pytest.raises(BadCodeRow, match="only a string is accepted"):
        task(evil)


@pytest.mark.parametrize("change,why", [
    ({"public_test_cases": "[{\"input\": \"1\"}]"}, "'public_test_cases' case 0: expected {'input': str"),
    ({"public_test_cases": "not json"}, "'public_test_cases' is neither JSON nor"),
    ({"public_test_cases": "[{\"input\": \"1\", \"output\": \"1\", \"testtype\": \"file\"}]"}, "case 0"),
    ({"metadata": "{}"}, "a functional test needs metadata's 'func_name'"),
    ({"public_test_cases": "[{\"input\": \"oops\", \"output\": \"1\", \"testtype\": \"functional\"}]"},
     "input lines and output must be JSON"),
    ({"public_test_cases": "[]", "private_test_cases": "[]"}, "without test cases"),
])
def test_a_bad_livecodebench_row_is_named_by_file_and_line(tmp_path, change, why):
    path = tmp_path / "lcb.jsonl"
    rows = [ROWS["credo_sum"], dict(ROWS["credo_add"], **change)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env_cls = type(lcb_env())
    with pytest.raises(DataError) as exc:
        load_rows(str(path), env_cls.data_keys("question_content", "public_test_cases"), check=env_cls.check_row)
    assert str(exc.value).startswith(f"{path}:2: ") and why in str(exc.value), str(exc.value)
    assert len(load_rows(LCB_FILE, ("question_content",), check=env_cls.check_row)) == 5
    with pytest.raises(BadCodeRow, match="^here: "):
        check_row("here", dict(ROWS["credo_add"], **change))
