"""arith_multi: three sums per prompt, graded turn scores (fraction right), so partial progress, improvement and
regression all occur within an episode."""
import pytest

from envs import make_env
from envs.arith_multi import make_multi_split
from rewards.arith_multi import MultiSumVerifier, parts_correct

SAMPLE = {"answer": [7, 13, 120]}


@pytest.mark.parametrize("text,score", [
    ("\\boxed{7} \\boxed{13} \\boxed{120}", 1.0),
    ("\\boxed{7} \\boxed{14} \\boxed{120}", 2 / 3),
    ("\\boxed{8} \\boxed{13} \\boxed{0}", 1 / 3),
    ("7, 13, 120", 0.0),                                   # neither boxes nor equations: nothing committed to
    ("(1) 3 + 4 = 7\n(2) 6 + 7 = 13\n(3) 100 + 20 = 120", 1.0),  # no boxes: the equations' results
    ("(1) 3 + 4 = 7\n(2) 6 + 7 = 14", 1 / 3),              # two results for three parts: the third is wrong
    ("so 3 + 4 = 7. Then 6 + 7 = 13. And 100 + 20 = 120.", 1.0),  # a full stop is not a decimal
    ("(1) = 7.5 (2) = 13 (3) = 120", 0.0),                  # "= 7.5" is no integer result: 13, 120 misalign
    ("\\boxed{7} then 1 + 1 = 2", 1 / 3),                  # one box, one equation: neither outnumbers, boxes
    ("\\boxed{7} \\boxed{13} \\boxed{120} (check: 1 + 1 = 2)", 1.0),  # a box per part: equations ignored
    ("\\boxed{7} \\boxed{13}", 2 / 3),                      # a missing third box is wrong
    ("draft \\boxed{1} \\boxed{2} \\boxed{3} final \\boxed{7} \\boxed{13} \\boxed{120}", 1.0),  # last three count
    ("\\boxed{x} \\boxed{13} \\boxed{120}", 2 / 3),
])
def test_score_is_the_fraction_of_parts_answered_right(text, score):
    assert MultiSumVerifier()(None, text, SAMPLE) == pytest.approx(score)


def test_box_j_answers_part_j():
    assert parts_correct("\\boxed{13} \\boxed{7} \\boxed{120}", SAMPLE["answer"]) == [False, False, True]


def test_rows_have_three_correct_parts_and_the_eval_split_is_held_out():
    rows = make_multi_split("train", 300, seed=1)
    for row in rows:
        assert len(row["parts"]) == 3 and len(row["answer"]) == 3
        for part, answer in zip(row["parts"], row["answer"]):
            assert answer == (part["a"] + part["b"] if part["op"] == "+" else part["a"] - part["b"]) >= 0
            assert f"{part['a']} {part['op']} {part['b']}" in row["prompt"]
    key = lambda r: tuple((p["a"], p["op"], p["b"]) for p in r["parts"])  # noqa: E731
    assert make_multi_split("eval", 50) == make_multi_split("eval", 50, seed=9)
    assert not {key(r) for r in rows} & {key(r) for r in make_multi_split("eval", 1000)}


def test_an_episode_shows_partial_progress_improvement_and_regression():
    row = make_multi_split("train", 1, seed=0)[0]
    a = row["answer"]
    env = make_env("arith_multi", max_turns=4, episode_end="max_turns")
    env.reset(row)
    texts = [f"\\boxed{{{a[0]}}} \\boxed{{-1}} \\boxed{{-1}}",            # 1/3
             f"\\boxed{{{a[0]}}} \\boxed{{{a[1]}}} \\boxed{{-1}}",         # 2/3: improvement
             f"\\boxed{{{a[0]}}} \\boxed{{-1}} \\boxed{{-1}}",            # 1/3: regression
             " ".join(f"\\boxed{{{x}}}" for x in a)]                     # solved
    results = [env.step(t) for t in texts]
    assert [r.score for r in results] == pytest.approx([1 / 3, 2 / 3, 1 / 3, 1.0])
    # the feedback counts the right parts, never names an expected answer
    for r, right in zip(results[:3], (1, 2, 1)):
        assert r.observation[0]["content"] == f"{right} of the 3 answers are correct. Check your work and try again."
    assert results[-1].done
