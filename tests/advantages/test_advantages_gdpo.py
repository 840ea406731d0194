import math

import pytest
import torch

from rl.advantages.gdpo import gdpo, per_reward_zscores


def test_two_reward_case_by_hand():
    # group 0: correctness [1, 0], format [1, 1] (constant -> 0); group 1: correctness [0, 0], format [1, 0]
    comps = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0]])
    groups = torch.tensor([0, 0, 1, 1])
    z = per_reward_zscores(comps, groups, group_eps=0.0)
    r = 1 / math.sqrt(0.5)  # |x - mean| / sample std for a pair (0.5 / sqrt(0.5))
    expected_z = [[0.5 * r, 0.0], [-0.5 * r, 0.0], [0.0, 0.5 * r], [0.0, -0.5 * r]]
    assert z.flatten().tolist() == pytest.approx(torch.tensor(expected_z).flatten().tolist())
    s = torch.tensor([0.5 * r, -0.5 * r, 0.5 * r, -0.5 * r]) * 2.0  # weights (2, 2)
    adv = gdpo(comps, groups, weights=torch.tensor([2.0, 2.0]), group_eps=0.0, final_eps=0.0)
    assert adv.tolist() == pytest.approx(((s - s.mean()) / s.std()).tolist(), rel=1e-5)
    assert gdpo(comps, groups, group_eps=0.0, final_norm="none").tolist() == pytest.approx([0.5 * r, -0.5 * r, 0.5 * r, -0.5 * r])


def test_all_equal_group_contributes_exactly_zero():
    comps = torch.tensor([[0.7, 1.0], [0.7, 1.0], [0.7, 1.0]])
    adv = gdpo(comps, torch.tensor([0, 0, 0]), final_norm="none")
    assert adv.tolist() == [0.0, 0.0, 0.0]


def test_token_normalisation_weights_responses_by_length():
    comps = torch.tensor([[1.0], [0.0], [1.0], [0.0]])
    groups = torch.tensor([0, 0, 1, 1])
    lengths = torch.tensor([10, 1, 1, 1])
    s = gdpo(comps, groups, final_norm="none").double()
    w = lengths.double()
    mean = (w * s).sum() / w.sum()
    var = (w * (s - mean) ** 2).sum() / (w.sum() - 1)
    token = gdpo(comps, groups, final_norm="token", lengths=lengths)
    assert token.tolist() == pytest.approx(((s - mean) / torch.sqrt(var + 1e-8)).tolist(), rel=1e-5)
    response = gdpo(comps, groups, final_norm="response")
    assert not torch.allclose(token, response)  # the long response pulls the token mean up


def test_nan_abstentions_are_left_out_and_never_reach_the_advantage():
    nan = float("nan")
    comps = torch.tensor([[1.0, nan], [0.0, 1.0], [1.0, 0.0], [0.0, nan]])
    groups = torch.tensor([0, 0, 0, 0])
    z = per_reward_zscores(comps, groups, group_eps=0.0)
    assert z[0, 1] == 0.0 and z[3, 1] == 0.0
    assert z[1, 1].item() == pytest.approx(0.5 / math.sqrt(0.5))  # stats over the two present values only
    adv = gdpo(comps, groups)
    assert torch.isfinite(adv).all()
    all_abstain = torch.tensor([[1.0, nan], [0.0, nan]])
    assert torch.isfinite(gdpo(all_abstain, torch.tensor([0, 0]))).all()
