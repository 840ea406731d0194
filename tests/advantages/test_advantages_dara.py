import math

import pytest
import torch

from rl.advantages.dara import dara
from rl.advantages.gdpo import gdpo, per_reward_zscores


def random_batch(num_groups=27, group_size=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    dense = torch.randint(0, 2, (num_groups * group_size,), generator=g).float()
    sparse = torch.zeros(num_groups * group_size)
    sparse[0] = 1.0  # active in group 0 only
    groups = torch.arange(num_groups).repeat_interleave(group_size)
    dense[:group_size] = torch.tensor([1.0, 0.0, 1.0, 0.0])
    dense[group_size:2 * group_size] = torch.tensor([0.0, 1.0, 1.0, 1.0])  # keep the dense reward active
    return torch.stack([dense, sparse], dim=1), groups


@pytest.mark.parametrize("variant", ["asym", "sym"])
def test_w_max_one_equals_gdpo_exactly(variant):
    comps, groups = random_batch()
    adv, _ = dara(comps, groups, variant=variant, w_max=1.0)
    assert torch.equal(adv, gdpo(comps, groups))


def test_cap_binds_for_a_reward_active_in_one_of_27_groups():
    comps, groups = random_batch()
    comps[:, 0] = torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(27)  # dense reward active in all 27 groups
    _, info = dara(comps, groups, w_max=5.0)
    assert info["active_groups"].tolist() == [27, 1]
    assert info["rho"].tolist() == pytest.approx([1.0, 1 / 27])
    assert info["w"].tolist() == pytest.approx([1.0, 5.0])  # sqrt(27) = 5.2 is capped at 5
    _, loose = dara(comps, groups, w_max=10.0)
    assert loose["w"][1].item() == pytest.approx(math.sqrt(27))


def test_zero_density_reward_contributes_nothing_and_keeps_weight_one():
    comps, groups = random_batch()
    comps[:, 1] = 1.0  # constant everywhere: never active
    adv, info = dara(comps, groups, w_max=5.0, final_norm="none")
    assert info["rho"][1].item() == 0.0 and info["w"][1].item() == 1.0
    assert torch.allclose(adv, gdpo(comps[:, :1], groups, final_norm="none"))


def test_asym_amplifies_only_positive_z_while_sym_scales_both_sides():
    comps = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    z = per_reward_zscores(comps, groups)
    _, info = dara(comps, groups)
    w = info["w"].double()
    assert w.tolist() == pytest.approx([1.0, math.sqrt(3)])
    asym, _ = dara(comps, groups, variant="asym", final_norm="none")
    sym, _ = dara(comps, groups, variant="sym", final_norm="none")
    expected_asym = (z + (w - 1) * z.clamp(min=0)).sum(1)
    assert asym.tolist() == pytest.approx(expected_asym.tolist(), rel=1e-6)
    assert sym.tolist() == pytest.approx((z @ w).tolist(), rel=1e-6)
    assert asym[1].item() == pytest.approx((z[1, 0] + z[1, 1]).item(), rel=1e-6)  # the negative side is not scaled


def test_static_weights_replace_density_weights():
    comps, groups = random_batch()
    adv, info = dara(comps, groups, variant="sym", static_weights=torch.tensor([1.0, 2.0]))
    assert info["w"].tolist() == [1.0, 2.0]
    assert torch.allclose(adv, gdpo(comps, groups, weights=torch.tensor([1.0, 2.0])))


def test_nan_abstentions_never_reach_the_advantage():
    comps, groups = random_batch()
    comps[5, 1] = float("nan")
    adv, _ = dara(comps, groups)
    assert torch.isfinite(adv).all()


# --- the diagnostics (issue #48 item 6): energy per reward, active groups, whether the cap binds ---

def fixed_batch():
    """6 groups of 4: `dense` is active in all 6, `sparse` in 1 (rho 1/6: uncapped weight sqrt(6) = 2.45)."""
    dense = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0] * 3)
    sparse = torch.zeros(24)
    sparse[1] = 1.0
    return torch.stack([dense, sparse], dim=1), torch.arange(6).repeat_interleave(4)


def test_energy_is_g_minus_one_per_active_group():
    """A binary reward's sample-std z-scores square-sum to G - 1 = 3 in every group where it varies."""
    comps, groups = fixed_batch()
    _, info = dara(comps, groups, variant="sym", w_max=5.0)
    assert info["active_groups"].tolist() == [6, 1]
    assert info["energy"].tolist() == pytest.approx([3.0 * 6, 3.0 * 1], rel=1e-5)


def test_sym_weights_equalise_the_energy_while_the_cap_does_not_bind():
    comps, groups = fixed_batch()
    _, info = dara(comps, groups, variant="sym", w_max=5.0)
    assert info["w"][1].item() == pytest.approx(math.sqrt(6)) and not info["cap_binds"].any()
    assert info["weighted_energy"].tolist() == pytest.approx([18.0, 18.0], rel=1e-5)  # w^2 x 3 = 6 x 3
    _, capped = dara(comps, groups, variant="sym", w_max=2.0)  # sqrt(6) > 2: the sparse reward stays short
    assert capped["cap_binds"].tolist() == [False, True]
    assert capped["weighted_energy"].tolist() == pytest.approx([18.0, 4.0 * 3.0], rel=1e-5)


def test_asym_energy_counts_only_the_amplified_positive_side():
    comps, groups = fixed_batch()
    z = per_reward_zscores(comps, groups)
    _, info = dara(comps, groups, variant="asym", w_max=5.0)
    w = math.sqrt(6)
    expected = ((z[:, 1] + (w - 1) * z[:, 1].clamp(min=0)) ** 2).sum().item()  # one +1.5 and three -0.5 z-scores
    assert info["weighted_energy"][1].item() == pytest.approx(expected, rel=1e-5)
    assert expected == pytest.approx((1.5 * w) ** 2 + 3 * 0.25, rel=1e-5)
    assert info["weighted_energy"][0].item() == pytest.approx(info["energy"][0].item())  # the dense weight is 1


def test_cap_never_binds_for_static_weights_or_a_silent_reward():
    comps, groups = fixed_batch()
    _, static = dara(comps, groups, w_max=1.0, static_weights=torch.tensor([1.0, 3.0]))
    assert not static["cap_binds"].any()
    comps[:, 1] = 0.0  # never active: weight 1, nothing to cap
    _, silent = dara(comps, groups, w_max=1.0)
    assert silent["energy"][1].item() == 0.0 and not silent["cap_binds"].any()

