"""The code env's first message gives what the tests call (MBPP: the paper's sentence and the first test; HumanEval:
its own stub), over every shipped row; held-out tests never reach the model, in the prompt or in the feedback."""
import ast
import json
import os
import re
import warnings

import pytest

from envs import make_env
from envs.code_env import MBPP_SHOWN_TESTS
from tests.helpers import REPO_ROOT


def rows(name):
    with open(os.path.join(REPO_ROOT, "data", name)) as f:
        return [json.loads(line) for line in f]


MBPP, HUMANEVAL = rows("mbpp/sanitized.jsonl"), rows("humaneval/test.jsonl")


def first_message(row, answer_key):
    env = make_env("code", prompt_key="prompt", answer_key=answer_key, max_turns=3)
    return env, env.reset(row)[0]["content"]


def called_functions(row):
    """Names the tests call that the reference solution defines (the function under test)."""
    with warnings.catch_warnings():  # some reference solutions have regexes in plain strings ('\\w')
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        defined = {n.name for n in ast.parse(row["code"]).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        called = {n.func.id for t in row["test_list"] for n in ast.walk(ast.parse(t))
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return called & defined


def test_every_mbpp_prompt_names_the_function_its_tests_call():
    missing = []
    for row in MBPP:
        names = called_functions(row)
        assert names, f"mbpp-{row['task_id']}: no test calls a function of the reference solution"
        _, prompt = first_message(row, "test_list")
        missing += [f"mbpp-{row['task_id']}: {name}" for name in sorted(names)
                    if not re.search(rf"\b{name}\s*\(", prompt)]  # mbpp-77 calls `is_Diff (12345)`
    assert not missing, f"{len(missing)} of {len(MBPP)} MBPP prompts lack a called function: {missing[:10]}"


def test_every_humaneval_prompt_gives_its_own_signature_and_docstring():
    for row in HUMANEVAL:
        _, prompt = first_message(row, "test")
        assert row["prompt"] in prompt and f"def {row['entry_point']}(" in prompt, row["task_id"]
        assert "def check(" not in prompt, row["task_id"]  # the tests stay held out


def test_mbpp_prompt_is_the_papers_sentence_with_the_shown_tests_only():
    for row in MBPP:
        _, prompt = first_message(row, "test_list")
        shown, held_out = row["test_list"][:MBPP_SHOWN_TESTS], row["test_list"][MBPP_SHOWN_TESTS:]
        assert prompt.startswith(f"You are an expert Python programmer, and here is your task: {row['prompt'].strip()}"
                                 " Your code should pass these tests:\n\n" + "\n".join(t.strip() for t in shown))
        assert "```python" in prompt
        assert not [t for t in held_out if t.strip() in prompt], f"mbpp-{row['task_id']} shows a held-out test"


def test_feedback_names_a_shown_test_and_never_quotes_a_held_out_one():
    row = next(r for r in MBPP if r["task_id"] == 2)
    env, _ = first_message(row, "test_list")
    wrong = env.step("```python\ndef similar_elements(a, b):\n    return ()\n```")  # fails the shown test first
    assert "assert set(similar_elements((3, 4, 5, 6)" in wrong.observation[0]["content"]
    # Hard-codes the shown test's answer: passes it, fails both held-out tests.
    hard_coded = env.step("```python\ndef similar_elements(a, b):\n    return (4, 5)\n```")
    assert hard_coded.score == pytest.approx(1 / 3)
    feedback = hard_coded.observation[0]["content"]
    assert "held-out test 2 of 3" in feedback and "AssertionError" in feedback
    assert not [t for t in row["test_list"][1:] if t in feedback or "(1, 2, 3, 4)" in feedback]


def test_humaneval_feedback_never_quotes_the_check_function():
    row = HUMANEVAL[0]
    env, _ = first_message(row, "test")
    result = env.step("```python\ndef has_close_elements(numbers, threshold):\n    return False\n```")
    feedback = result.observation[0]["content"]
    assert result.score == 0.0 and "held-out test 1 of 1" in feedback
    assert "def check" not in feedback and "candidate(" not in feedback and "METADATA" not in feedback
