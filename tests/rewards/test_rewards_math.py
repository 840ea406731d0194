import json
import os
import re

import pytest

from rewards.math import MathVerifier

MATH500 = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "data", "math500", "test.jsonl")


def last_boxed(text: str) -> str:
    """The content of the last \\boxed{...} with balanced braces."""
    start = text.rindex("\\boxed")
    i = text.index("{", start)
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[start:j + 1]
    raise ValueError("unbalanced")


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(timeout_s=20)
    yield v
    v.close()


@pytest.fixture(scope="module")
def math500():
    with open(MATH500) as f:
        return [json.loads(line) for line in f]


def test_every_math500_gold_answer_verifies_against_its_own_solution(verifier, math500):
    assert len(math500) == 500
    failures = [row["id"] for row in math500
                if verifier.verify(row["answer"], f"So the answer is {last_boxed(row['solution'])}.") != 1.0]
    assert failures == []
    assert verifier.stats.failures == 0


def test_wrong_answers_do_not_verify(verifier, math500):
    # Pair each problem with the next problem's answer, skipping pairs whose answers are equal.
    wrong = [(a["answer"], b["answer"]) for a, b in zip(math500, math500[1:])
             if re.sub(r"\s", "", a["answer"]) != re.sub(r"\s", "", b["answer"])][:100]
    accepted = [(g, w) for g, w in wrong if verifier.verify(g, f"\\boxed{{{w}}}") == 1.0]
    # Different strings can still be equal values (e.g. 0.5 and \frac12); those must be genuinely equal.
    assert len(accepted) <= 2, accepted


def test_equivalent_forms_verify(verifier):
    assert verifier.verify("\\frac{1}{2}", "the result is \\boxed{0.5}") == 1.0
    assert verifier.verify("3\\sqrt{2}", "\\boxed{\\sqrt{18}}") == 1.0
    assert verifier.verify("12", "no boxed answer, just words") == 0.0


def test_a_call_past_the_deadline_is_killed_counted_and_scored_zero():
    v = MathVerifier(timeout_s=20)
    assert v.verify("2", "\\boxed{2}") == 1.0  # warm the worker (its first call imports math-verify)
    v.timeout_s = 0.0
    assert v.verify("\\frac{1}{3}", "\\boxed{\\frac{2}{6}}") == 0.0
    assert v.stats.timeouts == 1
    v.timeout_s = 20
    assert v.verify("2", "\\boxed{2}") == 1.0  # a fresh worker serves the next call
    v.close()
