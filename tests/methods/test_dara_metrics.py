"""rl/methods/dara.py: the step's DARA metrics (issue #48 item 6) from the advantage's info, per reward."""
import pytest
import torch

from rl.advantages.dara import dara
from rl.methods.dara import dara_metrics


def fixed_batch():
    """6 groups of 4: `dense` active in all 6, `sparse` in group 0 only (uncapped weight sqrt(6))."""
    dense = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0] * 3)
    sparse = torch.zeros(24)
    sparse[1] = 1.0
    return torch.stack([dense, sparse], dim=1), torch.arange(6).repeat_interleave(4)


def test_dara_method_logs_every_diagnostic_per_reward():
    comps, groups = fixed_batch()
    _, info = dara(comps, groups, w_max=2.0)
    m = dara_metrics(info, ["dense", "sparse"])
    assert m["dara/num_groups"] == 6.0
    assert (m["dara/active_groups/dense"], m["dara/active_groups/sparse"]) == (6.0, 1.0)
    assert (m["dara/cap_binds/dense"], m["dara/cap_binds/sparse"]) == (0.0, 1.0)
    assert m["dara/energy/sparse"] == pytest.approx(3.0, rel=1e-5) and m["dara/w/sparse"] == 2.0
    assert "dara/weighted_energy/dense" in m and "dara/rho/sparse" in m
