"""--episode_end for every verify-and-refine env: stop at the first success, or play every turn (a correct turn is
told so, never what the answer is, and the next turn may keep or break it)."""
import json
import os

import pytest

from envs import make_env
from envs.arith import make_arith_split
from envs.arith_multi import make_multi_split
from envs.base import EPISODE_ENDS
from tests.helpers import REPO_ROOT


def _first_row(path):
    with open(os.path.join(REPO_ROOT, "data", *path)) as f:
        return json.loads(f.readline())


def arith_case():
    row = make_arith_split("train", 1, 0)[0]
    return "arith", {}, row, f"\\boxed{{{row['answer']}}}", "\\boxed{-1}"


def arith_multi_case():
    row = make_multi_split("train", 1, 0)[0]
    return "arith_multi", {}, row, " ".join(f"\\boxed{{{a}}}" for a in row["answer"]), "\\boxed{-1}"


def math_case():
    row = _first_row(("math500", "test.jsonl"))
    return "math", {}, row, f"\\boxed{{{row['answer']}}}", "\\boxed{-123456789}"


def code_case():
    with open(os.path.join(REPO_ROOT, "data", "mbpp", "sanitized.jsonl")) as f:
        row = next(r for r in map(json.loads, f) if r["task_id"] == 2)
    return ("code", {"prompt_key": "prompt", "answer_key": "test_list"}, row, f"```python\n{row['code']}\n```",
            "```python\ndef similar_elements(a, b):\n    return ()\n```")


CASES = [arith_case, arith_multi_case, math_case, code_case]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_success_ends_the_episode_at_the_first_correct_turn(case):
    name, keys, row, right, wrong = case()
    env = make_env(name, max_turns=3, episode_end="success", **keys)
    env.reset(row)
    assert not env.step(wrong).done
    solved = env.step(right)
    assert solved.score == 1.0 and solved.done and solved.observation == []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_max_turns_plays_every_turn_and_a_solution_can_be_kept_or_broken(case):
    name, keys, row, right, wrong = case()
    env = make_env(name, max_turns=3, episode_end="max_turns", **keys)
    env.reset(row)
    solved = env.step(right)
    assert solved.score == 1.0 and not solved.done
    feedback = solved.observation[0]["content"]
    # the same text for every problem, so it cannot carry the answer; it says the answer is right
    assert feedback == env.solved_feedback
    assert "correct" in feedback.lower() or "passed" in feedback.lower()
    assert not any(ch.isdigit() for ch in feedback)
    broken = env.step(wrong)
    assert broken.score < 1.0 and not broken.done
    assert broken.observation[0]["content"] != env.solved_feedback
    last = env.step(right)
    assert last.score == 1.0 and last.done and last.observation == []


def test_an_unknown_episode_end_is_refused():
    with pytest.raises(ValueError, match="episode_end"):
        make_env("arith", max_turns=2, episode_end="forever")
    assert EPISODE_ENDS == ("success", "max_turns")
