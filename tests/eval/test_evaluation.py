import itertools
import math

import pytest

from rl.eval.evaluation import aggregate, markdown_table, pass_at_k


@pytest.mark.parametrize("n,c,k,expected", [(4, 0, 1, 0.0), (4, 4, 2, 1.0), (4, 1, 1, 0.25), (4, 1, 2, 0.5),
                                            (5, 2, 2, 1 - 3 / 10), (8, 3, 4, 1 - 5 / 70)])
def test_pass_at_k_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("n,c,k", [(n, c, k) for n in range(1, 7) for c in range(n + 1) for k in range(1, n + 1)])
def test_pass_at_k_equals_brute_force_over_k_subsets(n, c, k):
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute)


def test_k_larger_than_n_is_refused():
    with pytest.raises(ValueError, match="pass@8 needs at least 8"):
        pass_at_k(4, 1, 8)
    with pytest.raises(ValueError, match="--k 3 is larger than --n 2"):
        aggregate([{"correct_by_turn": [[1], [0]]}], ks=[1, 3], max_turns=1)


def test_best_turn_counts_any_correct_turn_and_pass_counts_the_final_one():
    problems = [{"correct_by_turn": [[0, 1], [1, 0], [0, 0], [1]]}]  # 4 samples, up to 2 turns
    m = aggregate(problems, ks=[1, 4], max_turns=2)
    assert m["pass@1"] == pytest.approx(2 / 4)            # final turns: 1, 0, 0, 1
    assert m["best_turn_pass@1"] == pytest.approx(3 / 4)  # any turn: 1, 1, 0, 1
    assert m["pass@4"] == 1.0 and m["best_turn_pass@4"] == 1.0
    assert m["success_by_turn/1"] == pytest.approx(2 / 4) and m["success_by_turn/2"] == pytest.approx(3 / 4)
    assert m["avg_turns_to_success"] == pytest.approx((2 + 1 + 1) / 3)
    assert m["success_rate"] == pytest.approx(3 / 4) and m["mean@4"] == pytest.approx(2 / 4)


def test_no_success_gives_nan_turns_and_compare_table_shows_differences():
    m = aggregate([{"correct_by_turn": [[0, 0]]}], ks=[1], max_turns=2)
    assert math.isnan(m["avg_turns_to_success"]) and m["success_rate"] == 0.0
    table = markdown_table({"pass@1": 0.5}, {"pass@1": 0.25}, names=("new", "old"))
    assert "| pass@1 | 0.5000 | 0.2500 | +0.2500 |" in table


def test_under_max_turns_best_and_final_turn_differ_by_the_solutions_later_turns_broke():
    # --episode_end max_turns, 3 turns: solved and kept; solved then broken; broken then solved again; never solved
    problems = [{"correct_by_turn": [[1, 1, 1], [1, 0, 0], [1, 0, 1], [0, 0, 0]],
                 "score_by_turn": [[1, 1, 1], [1, 0, 0], [1, 0.5, 1], [0, 0.5, 0]]}]
    m = aggregate(problems, ks=[1, 2], max_turns=3)
    assert m["best_turn_pass@1"] == pytest.approx(3 / 4)
    assert m["final_turn_pass@1"] == m["pass@1"] == pytest.approx(2 / 4)
    # pairs (correct at k, turn k + 1): kept 1->1 twice (sample 0), broken 1->0 (samples 1, 2), sample 2's 1 -> 1
    # is not a pair (turn 2 was wrong), so 2 kept of 4
    assert m["preservation_rate"] == pytest.approx(2 / 4) and m["regression_rate"] == pytest.approx(2 / 4)
    assert m["avg_turns_to_success"] == pytest.approx(1.0)
    assert m["mean_final_score"] == pytest.approx((1 + 0 + 1 + 0) / 4)
    assert m["mean_best_score"] == pytest.approx((1 + 1 + 1 + 0.5) / 4)


def test_rates_are_undefined_when_no_turn_follows_a_correct_one():
    m = aggregate([{"correct_by_turn": [[0, 1], [1], [0, 0]]}], ks=[1], max_turns=2)  # --episode_end success
    assert math.isnan(m["preservation_rate"]) and math.isnan(m["regression_rate"])
    assert m["best_turn_pass@1"] == m["final_turn_pass@1"]
