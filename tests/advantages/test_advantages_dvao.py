"""rl/advantages/dvao.py against the estimator the DARA authors run as DVAO, on the authors' own test inputs.

Ported below (formulas and numbers unchanged, names shortened), from zhaihaotian/DARA at commit
0459102045705674a9ad07748708facb8c5dc0b2:
- tool_calling/tests/test_multi_reward_algos.py: make_batch's scores, lengths and uids, the shuffled order of
  test_all_estimators_match_independent_numpy_token_reference, numpy_reference's "dvao" branch, and the checks of
  test_dvao_population_std_and_no_final_whitening and test_all_conflicts_and_all_constant_channels_are_finite;
- math/rdgdpo/advantages.py: compute_advantages' "dvao" branch (the authors' second implementation, in torch);
- math/tools/check_advantages.py: its rewards, uids and response lengths, its all-zero rewards and its `opposite`
  group with the hand value [0, 0, -1, 1].
The formula is the same in the top-level layout's vendor/verl/verl/trainer/ppo/multi_reward_algos.py (commit 54024d0).
"""
import numpy as np
import pytest
import torch

from rl.advantages.dvao import dvao
from rl.methods.dvao import dvao_metrics

# --- the authors' inputs ---
TOOL_SCORES = [[-3, 0], [-1, 1], [1, 0], [3, 1], [0, 0], [1, 0], [2, 0], [3, 0]]  # correctness, format
TOOL_LENGTHS = [1, 2, 4, 3, 5, 2, 1, 4]
TOOL_ORDER = [4, 0, 5, 1, 6, 2, 7, 3]  # "noncontiguous prompt groups exercise UID grouping after balancing"
MATH_UIDS = ["a", "b", "a", "b", "a", "b", "a", "b"]
MATH_REWARDS = {"correctness": [0., 0., 1., 1., 0., 0., 1., 1.], "length": [0., 0., 0., 1., 0., 0., 0., 1.]}
OPPOSITE = {"correctness": [0., 1., 0., 1.], "length": [1., 0., 0., 1.]}


def numpy_reference_dvao(scores, mask, uids):
    """zhaihaotian/DARA@0459102 tool_calling/tests/test_multi_reward_algos.py, numpy_reference, method 'dvao'."""
    scores = np.asarray(scores, dtype=np.float64)
    groups = [np.flatnonzero(uids == uid) for uid in dict.fromkeys(uids)]
    result = np.zeros(len(scores))
    for rows in groups:
        values = scores[rows]
        denominator = 0.5 * values.std(0, ddof=0).sum()
        if denominator > 1e-8:
            result[rows] = 0.5 * (values - values.mean(0)).sum(-1) / denominator
    return result[:, None] * mask


def math_reference_dvao(channels: dict, index: list, base_weights=(0.5, 0.5)):
    """zhaihaotian/DARA@0459102 math/rdgdpo/advantages.py, compute_advantages, method 'dvao' (response scalars)."""
    scores = torch.stack([torch.as_tensor(v, dtype=torch.float32) for v in channels.values()], dim=-1)
    groups = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    weights = scores.new_tensor(base_weights)
    result = torch.zeros_like(scores[:, 0])
    for rows in groups.values():
        values = scores[rows]
        denominator = (weights * values.std(dim=0, correction=0)).sum()
        if denominator > 1e-8:
            result[rows] = ((values - values.mean(0)) * weights).sum(-1) / denominator
    return result


def group_tensor(uids) -> torch.Tensor:
    names = list(dict.fromkeys(uids))
    return torch.tensor([names.index(u) for u in uids])


def tool_batch(order=None):
    scores = np.array(TOOL_SCORES, dtype=np.float32)
    lengths = np.array(TOOL_LENGTHS)
    uids = np.array([f"g{i // 4}" for i in range(len(scores))], dtype=object)
    if order is not None:
        scores, lengths, uids = scores[order], lengths[order], uids[order]
    mask = np.arange(5)[None, :] < lengths[:, None]
    return scores, mask, uids


# --- the authors' estimators, on their inputs ---

@pytest.mark.parametrize("order", [None, TOOL_ORDER], ids=["contiguous", "authors-shuffled"])
def test_matches_the_authors_numpy_reference_on_their_tool_calling_batch(order):
    scores, mask, uids = tool_batch(order)
    adv, _ = dvao(torch.tensor(scores), group_tensor(list(uids)))
    expected = numpy_reference_dvao(scores, mask, uids)
    token_values = adv.double().numpy()[:, None] * mask  # a response's advantage on each of its tokens
    np.testing.assert_allclose(token_values, expected, atol=2e-6)


def test_matches_the_authors_torch_code_on_their_math_check_inputs():
    comps = torch.tensor(list(MATH_REWARDS.values())).T
    adv, _ = dvao(comps, group_tensor(MATH_UIDS))
    assert adv.tolist() == pytest.approx(math_reference_dvao(MATH_REWARDS, MATH_UIDS).tolist(), abs=1e-6)


def test_opposite_rewards_give_the_authors_hand_value():
    # check_advantages.py: "DVAO group population std denominator, independently calculated"
    adv, info = dvao(torch.tensor(list(OPPOSITE.values())).T, torch.zeros(4, dtype=torch.long))
    assert adv.tolist() == pytest.approx([0.0, 0.0, -1.0, 1.0])
    assert info["w"].tolist() == pytest.approx([0.5, 0.5])  # equal spread, equal share


def test_population_std_and_no_final_whitening():
    # the authors' test_dvao_population_std_and_no_final_whitening: over the valid tokens the advantage is neither
    # zero-mean nor unit-std
    scores, mask, uids = tool_batch()
    adv, _ = dvao(torch.tensor(scores), group_tensor(list(uids)))
    tokens = np.broadcast_to(adv.double().numpy()[:, None], mask.shape)[mask]
    assert abs(tokens.mean()) > 0.01 and abs(tokens.std(ddof=1) - 1) > 0.01


@pytest.mark.parametrize("scores", [[[1, 0]] * 8, [[0, 0]] * 8], ids=["constant", "all-zero"])
def test_groups_where_no_reward_varies_get_zero_and_stay_finite(scores):
    adv, info = dvao(torch.tensor(scores, dtype=torch.float32), torch.arange(8) // 4)
    assert torch.isfinite(adv).all() and adv.abs().sum().item() == 0
    assert info["live_groups"] == 0 and info["w"].tolist() == [0.0, 0.0]


# --- the weights it reports (dvao/w/<reward>) ---

def test_each_z_score_is_weighted_by_its_share_of_the_group_spread():
    comps = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 2.0]])  # sigma: 0.5 and 0.866
    groups = torch.zeros(4, dtype=torch.long)
    adv, info = dvao(comps, groups)
    sigma = comps.double().std(0, unbiased=False)
    share = sigma / sigma.sum()
    z = (comps.double() - comps.double().mean(0)) / sigma
    assert adv.tolist() == pytest.approx((z @ share).tolist(), rel=1e-6)
    assert info["w"].tolist() == pytest.approx(share.tolist(), rel=1e-6) and info["w"][1] > info["w"][0]


def test_a_reward_constant_in_a_group_gets_no_weight_there():
    comps = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    groups = torch.tensor([0, 0, 1, 1])  # group 0: only reward 0 varies; group 1: both, equally
    _, info = dvao(comps, groups)
    assert info["w"].tolist() == pytest.approx([(1.0 + 0.5) / 2, (0.0 + 0.5) / 2])
    assert info["active_groups"].tolist() == [2, 1] and info["live_groups"] == 2


def test_metrics_name_each_reward():
    _, info = dvao(torch.tensor(list(OPPOSITE.values())).T, torch.zeros(4, dtype=torch.long))
    m = dvao_metrics(info, ["correctness", "length"])
    assert m["dvao/w/correctness"] == pytest.approx(0.5) and m["dvao/active_groups/length"] == 1.0
    assert (m["dvao/live_groups"], m["dvao/num_groups"]) == (1.0, 1.0)


# --- credo's readings where the authors' code is silent ---

def test_more_than_two_rewards_use_equal_base_weights_and_only_their_ratio_matters():
    g = torch.Generator().manual_seed(0)
    comps = torch.randint(0, 3, (24, 3), generator=g).float()
    groups = torch.arange(6).repeat_interleave(4)
    adv, info = dvao(comps, groups)
    scaled, _ = dvao(comps, groups, base_weights=torch.tensor([7.0, 7.0, 7.0]))
    assert torch.allclose(adv, scaled)
    live = info["live_groups"]
    assert live > 0 and info["w"].sum().item() == pytest.approx(1.0)
    # two rewards, default weights: the authors' 0.5 / 0.5
    two, _ = dvao(comps[:, :2], groups)
    assert torch.allclose(two, dvao(comps[:, :2], groups, base_weights=torch.tensor([0.5, 0.5]))[0])


def test_an_abstention_is_left_out_of_its_reward_statistics():
    comps = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, float("nan")], [0.0, 0.0]])
    adv, _ = dvao(comps, torch.zeros(4, dtype=torch.long))
    assert torch.isfinite(adv).all()
    # reward 1 over its three present values (1, 0, 0): mean 1/3, population std sqrt(2)/3
    sigma = torch.tensor([0.5, 2 ** 0.5 / 3], dtype=torch.float64)
    expected_row2 = (0.5 * 0.5 + 0.0) / (0.5 * sigma).sum()  # the abstained reward contributes 0
    assert adv[2].item() == pytest.approx(expected_row2.item(), rel=1e-6)


@pytest.mark.parametrize("weights", [[1.0, -1.0], [0.0, 0.0], [1.0, 1.0, 1.0]])
def test_bad_base_weights_are_refused(weights):
    with pytest.raises(ValueError, match="base weights"):
        dvao(torch.zeros(4, 2), torch.zeros(4, dtype=torch.long), base_weights=torch.tensor(weights))
