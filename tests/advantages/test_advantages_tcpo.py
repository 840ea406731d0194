from types import SimpleNamespace

import pytest
import torch

from envs import make_env
from envs.arith import make_arith_split
from rl.advantages.tcpo import eligible_turns, tcpo
from rl.methods.tcpo_counterfactuals import candidate_turns

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


def play(env_name, row, texts, episode_end):
    """Turn scores of one scripted episode (NaN after it ended), as rl/rollout/episodes.py records them."""
    env = make_env(env_name, max_turns=len(texts), episode_end=episode_end)
    env.reset(row)
    scores = [NAN] * len(texts)
    for k, text in enumerate(texts):
        result = env.step(text)
        scores[k] = result.score
        if result.done:
            break
    return scores


def test_preservation_and_regression_credit_fire_with_their_signs_when_a_solution_can_be_broken():
    """Arith under --episode_end max_turns: a solved answer can be kept (A), broken (B) or never found (C)."""
    row = make_arith_split("train", 1, 0)[0]
    right, wrong = f"\\boxed{{{row['answer']}}}", "\\boxed{-1}"
    scripts = {"keeps": [right, right, right], "breaks": [right, wrong, wrong], "fails": [wrong, wrong, right]}
    scores = torch.tensor([play("arith", row, s, "max_turns") for s in scripts.values()])
    assert scores.tolist() == [[1, 1, 1], [1, 0, 0], [0, 0, 1]]  # every episode played its 3 turns
    adv, p = tcpo(scores, torch.tensor([0, 0, 0]), beta_pres=0.1, beta_reg=1.0, return_parts=True)
    assert p["pres"][0, 1:].tolist() == pytest.approx([0.1, 0.1])       # kept: bonus on each later turn
    assert p["reg"][1, 1:].tolist() == pytest.approx([-1.0, -1.0])      # broken: penalty, still below the best
    assert p["pres"][1].abs().sum() == 0 and p["reg"][0].abs().sum() == 0 and p["reg"][2].abs().sum() == 0
    assert adv[0, 1] > 0 > adv[1, 1]  # keeping the solution beats breaking it at the same turn
    # the same scripts under --episode_end success stop at the first solution: nothing to preserve or break
    stopped = torch.tensor([play("arith", row, s, "success") for s in scripts.values()])
    assert torch.isnan(stopped[0, 1:]).all() and torch.isnan(stopped[1, 1:]).all()
    _, q = tcpo(stopped, torch.tensor([0, 0, 0]), return_parts=True)
    assert q["pres"].abs().sum() == 0 and q["reg"].abs().sum() == 0


def test_first_turn_prior_none_gives_the_first_turn_no_retrospective_credit_and_hindsight_instead():
    scores = torch.tensor([[0.5, 1.0], [0.0, 0.0]])
    groups = torch.tensor([0, 0])
    _, zero = tcpo(scores, groups, first_turn_prior="zero", return_parts=True)
    assert zero["imp"][:, 0].tolist() == [0.5, 0.0]     # prior 0: the partial first turn is an improvement
    assert zero["hind"][:, 0].tolist() == [0.0, 0.0]    # and so not eligible: trajectory 1 has no eligible peer
    _, none = tcpo(scores, groups, first_turn_prior="none", return_parts=True)
    assert none["imp"][:, 0].tolist() == [0.0, 0.0]
    assert none["hind"][:, 0].tolist() == pytest.approx([1.0, -1.0])  # future best 1 vs 0, relative to the peer
    assert none["imp"][:, 1].tolist() == pytest.approx([0.5, 0.0])     # later turns unchanged
    with pytest.raises(ValueError, match="first_turn_prior"):
        tcpo(scores, groups, first_turn_prior="half")


def test_counterfactual_is_used_on_eligible_turns_only():
    # turn 2 of trajectory 0 follows a solution (not eligible); turn 2 of trajectory 1 is 0 -> 0 (eligible)
    scores = torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    cf = torch.tensor([[NAN, 0.5], [NAN, 0.3], [NAN, NAN]])
    _, p = tcpo(scores, torch.tensor([0, 0, 0]), counterfactual=cf, return_parts=True)
    assert p["cf"][:, 1].tolist() == pytest.approx([0.0, 0.3, 0.0])


def test_counterfactual_candidates_are_non_improving_turns_before_success():
    scores = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [0.5, 0.5, NAN]])
    args = SimpleNamespace(tcpo_tau=1.0, tcpo_first_turn_prior="zero")
    expected = [[True, False, False],    # 0 at turn 1 is non-improving; turns after the solution are not eligible
                [False, False, False],   # solved at turn 1: everything after is preservation/regression
                [False, True, False]]    # 0.5 -> 0.5 is non-improving and unsolved; no turn 3
    assert candidate_turns(scores, args).tolist() == expected
    assert eligible_turns(scores).tolist() == expected
