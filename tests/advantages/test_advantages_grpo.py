import math

import pytest
import torch

import rl.advantages
from rl.advantages import grpo


def test_group_zscore_matches_hand_computation():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 4.0])
    groups = torch.tensor([0, 0, 0, 0, 7, 7])
    adv = grpo(scores, groups, eps=0.0)
    # group 0: mean 0.5, sample std sqrt(1/3); group 7: mean 3, sample std sqrt(2)
    s0 = math.sqrt(1 / 3)
    expected = [0.5 / s0, -0.5 / s0, -0.5 / s0, 0.5 / s0, -1 / math.sqrt(2), 1 / math.sqrt(2)]
    assert adv.tolist() == pytest.approx(expected, rel=1e-6)


def test_all_equal_group_gets_exactly_zero():
    adv = grpo(torch.tensor([0.3, 0.3, 0.3, 1.0, 0.0]), torch.tensor([0, 0, 0, 1, 1]))
    assert adv[:3].tolist() == [0.0, 0.0, 0.0]
    assert adv[3] > 0 > adv[4]


def test_group_of_one_gets_zero():
    adv = grpo(torch.tensor([5.0, 1.0, 2.0]), torch.tensor([3, 4, 4]))
    assert adv[0].item() == 0.0


def test_batch_scale_divides_by_batch_std():
    scores = torch.tensor([1.0, 0.0, 3.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    adv = grpo(scores, groups, eps=0.0, scale="batch")
    batch_std = scores.std(unbiased=True).item()
    assert adv.tolist() == pytest.approx([0.5 / batch_std, -0.5 / batch_std, 1 / batch_std, -1 / batch_std], rel=1e-6)


def test_none_scale_is_dr_grpo_mean_centering():
    adv = grpo(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([0, 0, 0, 0]), scale="none")
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_result_does_not_depend_on_order_or_group_id_values():
    """Ranks gather their responses in rank order, so a group split across ranks lands anywhere in the batch."""
    scores = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0, 0.25])
    groups = torch.tensor([10, 20, 10, 20, 10, 20])
    perm = torch.tensor([5, 0, 3, 1, 4, 2])
    adv = grpo(scores, groups)
    adv_perm = grpo(scores[perm], groups[perm] * 1000 + 3)
    assert adv_perm.tolist() == pytest.approx(adv[perm].tolist())


def test_unknown_scale_is_refused():
    with pytest.raises(ValueError, match="scale"):
        grpo(torch.zeros(2), torch.zeros(2, dtype=torch.long), scale="rank")


@pytest.mark.parametrize("name", ["grpo", "gdpo", "dara", "dvao", "gd2po_hard", "tcpo", "mt_grpo", "rloo", "maestro"])
def test_each_method_s_maths_is_public_as_rl_advantages_name(name):
    # the public names (DESIGN.md): rl.advantages.<name> is the function rl/advantages/<name>.py defines
    import importlib
    assert getattr(rl.advantages, name) is getattr(importlib.import_module(f"rl.advantages.{name}"), name)
    assert name in rl.advantages.__all__
