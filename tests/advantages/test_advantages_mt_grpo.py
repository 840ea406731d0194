"""MT-GRPO as Zeng et al.'s code assigns it (SiliangZeng/Multi-Turn-RL-Agent,
verifiers/trainers/mt_grpo_env_trainer.py `_assign_advantages`): outcome + coef x turn advantage on the tokens before
the env result, the outcome advantage alone after it, the combined advantage when there is no result."""
import math

import pytest
import torch

from rl.advantages.mt_grpo import ZENG_EPS, mt_grpo

NAN = float("nan")


def test_two_turn_group_matches_a_hand_computation_of_zengs_assignment():
    # 4 completions of one prompt, 2 turns each (--episode_end max_turns). Zeng: turn reward = turn 1's score,
    # outcome reward = the final turn's. Both are [1, 1, 0, 0]-like with mean 0.5 and sample std sqrt(1/3), so each
    # z-score is +-0.5 / (sqrt(1/3) + 1e-4).
    scores = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    z = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    outcome_adv = [z, z, -z, -z]
    turn_adv = [-z, z, -z, z]
    adv = mt_grpo(scores, torch.zeros(4, dtype=torch.long), lam=1.0)
    # tokens before the result (turn 1): outcome_adv + 1.0 * turn_adv
    assert adv[:, 0].tolist() == pytest.approx([o + t for o, t in zip(outcome_adv, turn_adv)], abs=1e-6)
    assert adv[:, 0].tolist() == pytest.approx([0.0, 2 * z, -2 * z, 0.0], abs=1e-6)
    # tokens after the result (the final turn): outcome_adv alone, no turn term
    assert adv[:, 1].tolist() == pytest.approx(outcome_adv, abs=1e-6)
    assert ZENG_EPS == 1e-4


def test_a_one_turn_completion_gets_the_combined_advantage():
    # --episode_end success: completion 0 solved at turn 1 and has no env result to split at. Zeng gives it
    # z(turn reward + outcome reward) over the whole group: combined = [1 + 1, 0 + 1, 0 + 0, 0 + 0].
    scores = torch.tensor([[1.0, NAN], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    combined = torch.tensor([2.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    expected = ((combined[0] - combined.mean()) / (combined.std() + 1e-4)).item()
    adv = mt_grpo(scores, torch.zeros(4, dtype=torch.long), lam=0.5)
    assert adv[0, 0].item() == pytest.approx(expected, rel=1e-6)
    assert adv[0, 1].item() == 0.0  # no such turn
    outcome = torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    z_out = (outcome - outcome.mean()) / (outcome.std() + 1e-4)
    z_turn1 = (scores[:, 0].double() - 0.25) / (scores[:, 0].double().std() + 1e-4)
    assert adv[1, 0].item() == pytest.approx((z_out[1] + 0.5 * z_turn1[1]).item(), rel=1e-6)  # before its result
    assert adv[1:, 1].tolist() == pytest.approx(z_out[1:].tolist(), rel=1e-6)                 # final turns


def test_every_turn_before_the_last_gets_its_own_turn_term_with_three_turns():
    # credo's reading for T > 2: turn k < last gets z(outcome) + lam * z_(prompt, k)(r[:, k])
    scores = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    adv = mt_grpo(scores, torch.zeros(3, dtype=torch.long), lam=2.0, eps=0.0)
    z = lambda x: (x - x.mean()) / x.std()  # noqa: E731
    out = z(scores[:, 2])
    for k in (0, 1):
        assert adv[:, k].tolist() == pytest.approx((out + 2.0 * z(scores[:, k])).tolist(), rel=1e-5)
    assert adv[:, 2].tolist() == pytest.approx(out.tolist(), rel=1e-5)


def test_groups_are_normalised_separately():
    scores = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    adv = mt_grpo(scores, torch.tensor([0, 0, 1, 1]))
    assert adv[2:].abs().sum().item() == 0.0  # identical completions of prompt 1: no signal
    assert adv[0, 1].item() > 0 > adv[1, 1].item()
