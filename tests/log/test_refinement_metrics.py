"""Step metrics of refinement: preservation and regression of solutions, best- and final-turn success."""
import math

import pytest
import torch

from rl.log.refinement_metrics import refinement_metrics, transition_rates

NAN = float("nan")


def test_rates_count_what_follows_each_solved_turn():
    turn_scores = torch.tensor([[1.0, 1.0, 1.0],    # kept, kept
                                [1.0, 0.0, 1.0],    # broken (0 -> 1 is not a pair)
                                [0.0, 2 / 3, 1.0],  # solved only at the end: no pair
                                [1.0, 1 / 3, 0.0]])  # broken (a graded drop below full marks is a regression)
    m = refinement_metrics(turn_scores)
    assert m["preservation_rate"] == pytest.approx(2 / 4) and m["regression_rate"] == pytest.approx(2 / 4)
    assert m["solved_then_pairs"] == 4
    assert m["best_turn_success"] == 1.0 and m["final_turn_success"] == pytest.approx(3 / 4)
    # consecutive pairs whose score fell: (1, 0), (1, 1/3), (1/3, 0) of 8
    assert m["turn_score_drop_rate"] == pytest.approx(3 / 8)


def test_without_turns_after_a_solution_the_rates_are_undefined():
    m = refinement_metrics(torch.tensor([[1.0, NAN], [0.0, 1.0], [0.0, 0.0]]))  # --episode_end success
    assert math.isnan(m["preservation_rate"]) and math.isnan(m["regression_rate"])
    assert m["best_turn_success"] == m["final_turn_success"] == pytest.approx(2 / 3)
    assert transition_rates([])["solved_then_pairs"] == 0
