import math

import pytest
import torch

from rl.advantages.mt_grpo import mt_grpo
from rl.advantages.tcpo import tcpo

NAN = float("nan")


def parts(scores, groups, **kw):
    return tcpo(torch.tensor(scores), torch.tensor(groups), return_parts=True, **kw)


def test_improvement_is_the_gain_over_the_best_earlier_turn():
    _, p = parts([[0.2, 0.6, 0.5]], [0])
    assert p["imp"][0].tolist() == pytest.approx([0.2, 0.4, 0.0])
    assert p["pres"][0].tolist() == [0, 0, 0] and p["reg"][0].tolist() == [0, 0, 0]


def test_preservation_bonus_after_a_solution():
    _, p = parts([[1.0, 1.0, 1.0]], [0], beta_pres=0.1)
    assert p["pres"][0].tolist() == pytest.approx([0.0, 0.1, 0.1])
    assert p["imp"][0].tolist() == pytest.approx([1.0, 0.0, 0.0])


def test_regression_penalty_after_a_solution():
    _, p = parts([[1.0, 0.4]], [0], beta_reg=1.0)
    assert p["reg"][0].tolist() == pytest.approx([0.0, -0.6])
    assert p["pres"][0, 1].item() == 0.0


def test_hindsight_compares_future_best_with_eligible_peers_of_the_same_prompt_and_turn():
    # group 0: three trajectories; at turn 1 the first two are eligible (no improvement over the prior 0).
    scores = [[0.0, 1.0], [0.0, 0.0], [0.5, 0.5]]
    _, p = parts(scores, [0, 0, 0], lambda_hind=1.0)
    assert p["hind"][:, 0].tolist() == pytest.approx([1.0, -1.0, 0.0])  # u = 1 vs peer 0; u = 0 vs peer 1
    # turn 2: trajectory 2 (0 -> 0) and 3 (0.5 -> 0.5) are eligible; their futures are 0 and 0.5
    assert p["hind"][:, 1].tolist() == pytest.approx([0.0, -0.5, 0.5])


def test_hindsight_is_zero_without_an_eligible_peer():
    _, p = parts([[0.0, 1.0], [0.7, 0.9]], [0, 0])
    assert p["hind"][0, 0].item() == 0.0  # the only eligible trajectory at turn 1
    _, p = parts([[0.0, 1.0], [0.0, 0.0]], [0, 1])  # same scores, different prompts: no peers
    assert p["hind"][:, 0].tolist() == [0.0, 0.0]


def test_counterfactual_refines_hindsight_where_given_and_is_skipped_where_nan():
    scores = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    groups = torch.tensor([0, 0])
    cf = torch.tensor([[0.4, NAN], [NAN, NAN]])
    _, base = tcpo(scores, groups, return_parts=True)
    adv_cf, p = tcpo(scores, groups, counterfactual=cf, cf_mix=0.5, return_parts=True, gamma=1.0)
    assert p["cf"][0, 0].item() == pytest.approx(0.4)
    # delayed(0, 0) = 0.5 * hind + 0.5 * cf = 0.5 * 1 + 0.2; trajectory 1 keeps its plain hindsight (-1)
    credit = torch.tensor([0.0 + 0.5 * 1.0 + 0.5 * 0.4, 0.0 - 1.0])
    expected = (credit - credit.mean()) / (credit.std() + 1e-6)
    assert adv_cf[:, 0].tolist() == pytest.approx(expected.tolist(), rel=1e-5)
    assert torch.equal(p["hind"], base["hind"])


def test_normalisation_within_prompt_and_turn_and_the_early_turn_prior():
    scores = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.5, NAN]])
    groups = torch.tensor([0, 0, 0, 1])
    adv, p = tcpo(scores, groups, gamma=0.9, return_parts=True)
    credit = p["imp"] + p["pres"] + p["reg"] + p["hind"]
    for k, prior in ((0, 1.0), (1, 0.9)):
        c = credit[:3, k]
        assert adv[:3, k].tolist() == pytest.approx(((c - c.mean()) / (c.std() + 1e-6) * prior).tolist(), rel=1e-5)
    assert adv[3, 0].item() == 0.0  # a group of one
    assert adv[3, 1].item() == 0.0  # no such turn


def test_ablation_switches_drop_their_part():
    scores = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    groups = torch.tensor([0, 0, 0])
    only_hind = tcpo(scores, groups, use_retro=False, gamma=1.0)
    _, p = tcpo(scores, groups, return_parts=True)
    h = p["hind"][:, 0]
    assert only_hind[:, 0].tolist() == pytest.approx(((h - h.mean()) / (h.std() + 1e-6)).tolist(), rel=1e-5)
    assert tcpo(torch.tensor([[0.3, 0.3]] * 3), groups).abs().sum().item() == 0.0  # identical trajectories


def test_mt_grpo_adds_the_turn_term_to_the_outcome_advantage():
    scores = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, NAN]])
    groups = torch.tensor([0, 0, 0])
    adv = mt_grpo(scores, groups, lam=1.0, eps=0.0)
    outcome = torch.tensor([1.0, 0.0, 1.0])  # the last present turn
    z_out = (outcome - outcome.mean()) / outcome.std()
    z_t1 = (scores[:, 0] - scores[:, 0].mean()) / scores[:, 0].std()
    z_t2 = torch.tensor([1.0, -1.0]) / math.sqrt(0.5) * 0.5  # turn 2 among the two that have it
    assert adv[:, 0].tolist() == pytest.approx((z_out + z_t1).tolist(), rel=1e-5, abs=1e-6)
    assert adv[:2, 1].tolist() == pytest.approx((z_out[:2] + z_t2).tolist(), rel=1e-5, abs=1e-6)
    assert adv[2, 1].item() == 0.0
