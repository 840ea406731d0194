"""DAPO's soft overlong punishment (eq. 13, verl's overlong_buffer) at the edges of its buffer, and which rows count
as truncated (rewards/overlong.py)."""
import pytest
import torch

from rewards.overlong import overlong_penalty
from rl.types import truncated_rows

EOS = 3


def test_penalty_is_zero_up_to_the_buffer_then_linear_to_minus_the_factor_at_the_budget():
    # L_max = 20, L_cache = 4: free up to 16 tokens, -1/4 per token after, -1 at 20 (DAPO eq. 13)
    lengths = torch.tensor([0, 10, 16, 17, 18, 19, 20])
    penalty = overlong_penalty(lengths, max_len=20, buffer_len=4)
    assert penalty.tolist() == [0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0]


def test_penalty_factor_scales_the_line_and_longer_responses_stay_at_the_floor():
    penalty = overlong_penalty(torch.tensor([16, 18, 20, 25]), max_len=20, buffer_len=4, factor=0.5)
    assert penalty.tolist() == [0.0, -0.25, -0.5, -0.5]


def test_a_buffer_as_long_as_the_budget_punishes_from_the_first_token():
    assert overlong_penalty(torch.tensor([0, 1, 8]), max_len=8, buffer_len=8).tolist() == [0.0, -0.125, -1.0]


@pytest.mark.parametrize("buffer_len", [0, 21, -2])
def test_a_buffer_outside_the_budget_is_an_error(buffer_len):
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(torch.tensor([5]), max_len=20, buffer_len=buffer_len)


def test_single_turn_rows_without_eos_are_truncated():
    turn_ids = torch.tensor([[0, 0, 0, -1], [0, 0, 0, 0], [0, -1, -1, -1]])
    ids = torch.tensor([[5, 6, EOS, 0], [5, 6, 7, 8], [EOS, 0, 0, 0]])
    assert truncated_rows(turn_ids, ids, [EOS]).tolist() == [False, True, False]


def test_a_trajectory_is_truncated_when_any_of_its_turns_ran_out_of_budget():
    # turn 0 | feedback | turn 1: the first row's turn 0 has no EOS, the second row's turns both end with one
    turn_ids = torch.tensor([[0, 0, -1, -1, 1, 1], [0, 0, -1, -1, 1, 1], [0, 0, -1, 1, 1, -1]])
    ids = torch.tensor([[5, 6, 9, 9, 7, EOS], [5, EOS, 9, 9, 7, EOS], [5, EOS, 9, 7, 8, 0]])
    assert truncated_rows(turn_ids, ids, [EOS, 4]).tolist() == [True, False, True]
