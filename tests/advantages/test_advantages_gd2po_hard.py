"""rl/advantages/gd2po_hard.py against both authors' codes, on the DARA authors' test inputs (the GD²PO repository
has no tests: its estimator is run here on the same inputs).

Ported below (formulas and numbers unchanged, names shortened):
- zhaihaotian/DARA at commit 0459102045705674a9ad07748708facb8c5dc0b2:
  tool_calling/tests/test_multi_reward_algos.py: make_batch's scores, lengths and uids, the shuffled order,
  numpy_reference's "gd2po_hard" branch (token-level whitening of the kept responses; the query weight returned
  beside it, applied to the loss), test_hard_neutral_channels_keep_responses_and_conflicts_stay_zero and
  test_all_conflicts_and_all_constant_channels_are_finite;
  tool_calling/tests/test_dara_three_rewards.py: the third (length) channel it adds to make_batch;
  math/rdgdpo/advantages.py: compute_advantages' "gd2po_hard" branch (response-level normalisation, the weight
  outside the surrogate) and math/tools/check_advantages.py's inputs and `opposite` group.
- Qwen-Applications/GD2PO at commit f1ad765bc9a330e6cf387f95e9c1e5a6c4bb2d02:
  tool-calling/verl/trainer/ppo/ray_trainer.py, compute_advantage's GDPO_Filter_GroupRatio branch with
  _compute_active_gdpo_advantages, _get_mixed_sign_conflict_mask, _compute_gdpo_group_keep_ratio and
  _apply_gdpo_keep_mask; core_algos.compute_grpo_outcome_advantage and torch_functional.masked_whiten as it calls them.
"""
import numpy as np
import pytest
import torch

from rl.advantages.gd2po_hard import gd2po_hard
from rl.advantages.gdpo import gdpo
from rl.methods.gd2po_hard import gd2po_metrics
from tests.advantages.test_advantages_dvao import MATH_REWARDS, MATH_UIDS, OPPOSITE, TOOL_ORDER, group_tensor, tool_batch

THIRD_CHANNEL = [0., 1., 0., 0., 1., 0., 0., 1.]  # test_dara_three_rewards.py's length channel, at token 0


def dara_numpy_reference(scores, mask, uids):
    """zhaihaotian/DARA@0459102 tool_calling/tests/test_multi_reward_algos.py, numpy_reference, 'gd2po_hard'."""
    scores = np.asarray(scores, dtype=np.float64)
    groups = [np.flatnonzero(uids == uid) for uid in dict.fromkeys(uids)]
    z = np.zeros_like(scores)
    for rows in groups:
        z[rows] = (scores[rows] - scores[rows].mean(0)) / (scores[rows].std(0, ddof=1) + 1e-6)
    weights = np.ones(len(scores))
    keep = ~((z > 1e-8).any(-1) & (z < -1e-8).any(-1))
    for rows in groups:
        weights[rows] = keep[rows].mean()
    values = z.sum(-1)
    token_values = np.broadcast_to(values[:, None], mask.shape)
    keep_mask = mask & keep[:, None]
    valid = token_values[keep_mask]
    out = np.zeros_like(token_values)
    if valid.size > 1:
        out[keep_mask] = (valid - valid.mean()) / np.sqrt(valid.var(ddof=1) + 1e-8)
    return out, weights


def dara_math_reference(channels: dict, index: list, epsilon=1e-6):
    """zhaihaotian/DARA@0459102 math/rdgdpo/advantages.py: standardize, normalize_responses, 'gd2po_hard'."""
    scores = torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in channels.values()], dim=-1)
    groups = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    channel_adv = torch.zeros_like(scores)
    for rows in groups.values():
        values = scores[rows]
        channel_adv[rows] = (values - values.mean(dim=0)) / (values.std(dim=0, correction=1) + epsilon)
    conflict = (channel_adv > 1e-8).any(-1) & (channel_adv < -1e-8).any(-1)
    keep = ~conflict
    query_weight = torch.zeros_like(scores[:, 0])
    for rows in groups.values():
        query_weight[rows] = keep[rows].float().mean()
    values = channel_adv.sum(-1)
    result = torch.zeros_like(values)
    if keep.sum() > 1:
        valid = values[keep]
        result[keep] = (valid - valid.mean()) / (valid.std(correction=1) + epsilon)
    return result, query_weight


def qwen_reference(channels: list, lengths, index, width=5):
    """Qwen-Applications/GD2PO@f1ad765 tool-calling/verl/trainer/ppo/ray_trainer.py, GDPO_Filter_GroupRatio: each
    reward as a token-level GRPO advantage, the conflict on its sum over tokens, the advantage scaled by the group keep
    ratio BEFORE masked whitening over the kept tokens."""
    n = len(index)
    lengths = torch.as_tensor(lengths)
    response_mask = (torch.arange(width)[None, :] < lengths[:, None]).float()

    def grpo_outcome(scores):  # core_algos.compute_grpo_outcome_advantage, epsilon 1e-6, torch.std unbiased
        scores = scores.clone()
        id2score = {}
        for i in range(n):
            id2score.setdefault(index[i], []).append(scores[i])
        stats = {idx: (torch.mean(torch.tensor(v)), torch.std(torch.tensor([v]))) if len(v) > 1
                 else (torch.tensor(0.0), torch.tensor(1.0)) for idx, v in id2score.items()}
        for i in range(n):
            scores[i] = (scores[i] - stats[index[i]][0]) / (stats[index[i]][1] + 1e-6)
        return scores.unsqueeze(-1) * response_mask

    token_adv = torch.stack([grpo_outcome(torch.as_tensor(c, dtype=torch.float32)) for c in channels])
    rollout_adv = (token_adv * response_mask).sum(dim=-1)
    conflict = (rollout_adv > 1e-8).any(dim=0) & (rollout_adv < -1e-8).any(dim=0)
    keep = ~conflict
    ratio = torch.zeros(n)
    for group_id in np.unique(index):
        members = torch.as_tensor(np.asarray(index) == group_id)
        ratio[members] = keep.float()[members].sum() / float(members.sum())
    new_advantage = token_adv.sum(dim=0) * ratio.unsqueeze(-1)
    keep_f = keep.float()
    filtered = new_advantage * keep_f.unsqueeze(-1) * response_mask
    whiten_mask = keep_f.unsqueeze(-1) * response_mask
    if whiten_mask.sum() == 0:
        return torch.zeros_like(filtered), ratio
    mean = (filtered * whiten_mask).sum() / (whiten_mask.sum() + 1e-8)          # masked_mean
    var = ((filtered - mean) ** 2 * whiten_mask).sum() / (whiten_mask.sum() + 1e-8)
    var = var * whiten_mask.sum() / (whiten_mask.sum() - 1)                        # masked_var, unbiased
    return (filtered - mean) * torch.rsqrt(var + 1e-8) * whiten_mask, ratio


def tool_tensors(order=None, third=False):
    scores, mask, uids = tool_batch(order)
    comps = torch.tensor(scores)
    if third:
        extra = np.array(THIRD_CHANNEL, dtype=np.float32)
        comps = torch.cat([comps, torch.tensor(extra if order is None else extra[order])[:, None]], dim=1)
    return comps, torch.tensor(mask.sum(1)), mask, list(uids)


# --- the DARA authors' port: weight on the loss ---

@pytest.mark.parametrize("order", [None, TOOL_ORDER], ids=["contiguous", "authors-shuffled"])
def test_token_reading_matches_the_dara_authors_numpy_reference(order):
    comps, lengths, mask, uids = tool_tensors(order)
    adv, info = gd2po_hard(comps, group_tensor(uids), weight_at="loss", final_norm="token", lengths=lengths)
    expected, weights = dara_numpy_reference(comps.numpy(), mask, np.array(uids, dtype=object))
    assert info["query_weight"].tolist() == weights.tolist()
    # their advantage is whitened; the loss multiplies it by the weight: credo's advantage is the product
    np.testing.assert_allclose(adv.double().numpy()[:, None] * mask, expected * weights[:, None], atol=2e-6)


def test_response_reading_matches_the_dara_authors_math_code():
    comps = torch.tensor(list(MATH_REWARDS.values())).T
    adv, info = gd2po_hard(comps, group_tensor(MATH_UIDS), weight_at="loss", final_norm="response")
    expected, weights = dara_math_reference(MATH_REWARDS, MATH_UIDS)
    assert info["query_weight"].tolist() == weights.tolist()
    assert adv.tolist() == pytest.approx((expected * weights).tolist(), abs=1e-6)


def test_neutral_rewards_keep_a_response_and_conflicts_stay_zero():
    # the authors' test_hard_neutral_channels_keep_responses_and_conflicts_stay_zero
    comps, lengths, _, uids = tool_tensors()
    adv, info = gd2po_hard(comps, group_tensor(uids), final_norm="token", lengths=lengths)
    assert info["query_weight"].tolist() == [0.5] * 4 + [1.0] * 4
    assert adv[[1, 2]].abs().sum().item() == 0 and info["dropped_frac"] == 0.25
    assert (info["groups_with_drops"], info["empty_groups"]) == (1, 0)


def test_opposite_group_from_the_authors_math_check():
    adv, info = gd2po_hard(torch.tensor(list(OPPOSITE.values())).T, torch.zeros(4, dtype=torch.long))
    assert adv[:2].count_nonzero() == 0 and info["query_weight"].tolist() == [0.5] * 4


@pytest.mark.parametrize("weight_at", ["advantage", "loss"])
def test_all_conflicts_and_all_constant_rewards_give_zero(weight_at):
    # the authors' test_all_conflicts_and_all_constant_channels_are_finite
    groups = torch.arange(8) // 4
    conflicts = torch.tensor([[-3., 1.], [-1., 1.], [1., 0.], [3., 0.]] * 2)
    adv, info = gd2po_hard(conflicts, groups, weight_at=weight_at, final_norm="token", lengths=torch.ones(8))
    assert adv.abs().sum().item() == 0 and info["query_weight"].sum().item() == 0 and info["empty_groups"] == 2
    for constant in (torch.tensor([[1., 0.]] * 8), torch.zeros(8, 2)):
        adv, _ = gd2po_hard(constant, groups, weight_at=weight_at)
        assert torch.isfinite(adv).all() and adv.abs().sum().item() == 0


# --- the GD²PO authors' code: weight on the advantage, before the whitening ---

@pytest.mark.parametrize("third", [False, True], ids=["two-rewards", "three-rewards"])
@pytest.mark.parametrize("order", [None, TOOL_ORDER], ids=["contiguous", "authors-shuffled"])
def test_token_reading_matches_the_gd2po_authors_code(order, third):
    comps, lengths, mask, uids = tool_tensors(order, third)
    adv, info = gd2po_hard(comps, group_tensor(uids), weight_at="advantage", final_norm="token", lengths=lengths)
    expected, ratio = qwen_reference(list(comps.T), lengths, uids)
    assert info["query_weight"].tolist() == pytest.approx(ratio.tolist())
    np.testing.assert_allclose(adv.double().numpy()[:, None] * mask, expected.double().numpy(), atol=2e-6)


def test_the_two_placements_differ_when_groups_keep_different_shares():
    comps, lengths, _, uids = tool_tensors()
    groups = group_tensor(uids)
    on_adv, _ = gd2po_hard(comps, groups, weight_at="advantage", final_norm="token", lengths=lengths)
    on_loss, _ = gd2po_hard(comps, groups, weight_at="loss", final_norm="token", lengths=lengths)
    assert not torch.allclose(on_adv, on_loss)
    assert torch.equal(on_adv == 0, on_loss == 0)  # the same responses dropped


def test_the_three_reward_input_drops_more_than_the_two_reward_one():
    two, _, _, uids = tool_tensors()
    three, _, _, _ = tool_tensors(third=True)
    _, info2 = gd2po_hard(two, group_tensor(uids))
    _, info3 = gd2po_hard(three, group_tensor(uids))
    assert info3["dropped_frac"] > info2["dropped_frac"]


# --- credo's readings and its metrics ---

def test_no_conflict_means_gdpo():
    comps = torch.tensor([[1., 1.], [0., 0.], [1., 0.], [0., 0.], [1., 1.], [0., 1.]])  # no sign conflicts
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    for weight_at in ("advantage", "loss"):
        adv, info = gd2po_hard(comps, groups, weight_at=weight_at)
        assert info["dropped_frac"] == 0.0 and torch.allclose(adv, gdpo(comps, groups))


def test_a_zero_weight_switches_a_reward_out_of_the_conflict_rule():
    comps = torch.tensor(list(OPPOSITE.values())).T
    _, info = gd2po_hard(comps, torch.zeros(4, dtype=torch.long), weights=torch.tensor([1.0, 0.0]))
    assert info["dropped_frac"] == 0.0


def test_an_abstention_is_neutral():
    comps = torch.tensor([[1., float("nan")], [0., 0.], [1., 1.], [0., 0.]])
    adv, info = gd2po_hard(comps, torch.zeros(4, dtype=torch.long))
    assert torch.isfinite(adv).all() and info["keep"][0].item()


def test_metrics_report_the_dropped_share():
    comps, _, _, uids = tool_tensors()
    _, info = gd2po_hard(comps, group_tensor(uids))
    m = gd2po_metrics(info)
    assert m["gd2po/dropped_frac"] == 0.25 and m["gd2po/query_weight_mean"] == pytest.approx(0.75)
    assert (m["gd2po/num_groups"], m["gd2po/groups_with_drops"], m["gd2po/empty_groups"]) == (2.0, 1.0, 0.0)


def test_unknown_placement_is_refused():
    with pytest.raises(ValueError, match="weight_at"):
        gd2po_hard(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long), weight_at="reward")

