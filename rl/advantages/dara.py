"""DARA: density-aware reward weights on top of GDPO (Sym and Asym variants).

A reward that is "active" (non-constant) in few groups gets a larger weight, up to w_max, so that sparse
signals are not drowned by dense ones: w_k = min(w_max, sqrt(rho_ref / rho_k)).
"""
import torch

from rl.advantages.gdpo import per_reward_zscores
from rl.advantages.stats import batch_normalize


def dara(components: torch.Tensor, group_ids: torch.Tensor, variant: str = "asym", w_max: float = 5.0,
         tau: float = 1e-8, static_weights: torch.Tensor = None, group_eps: float = 1e-6, final_norm: str = "response",
         final_eps: float = 1e-6, lengths: torch.Tensor = None):
    """DARA advantage.

    Args:
        components: Tensor[N, K] rewards (NaN = abstained); group_ids: Tensor[N] long.
        variant: "sym": S = sum_k w_k Z_k; "asym" (the paper's main variant): S = sum_k (Z_k + (w_k - 1) max(Z_k, 0)),
            which amplifies only the positive side of a sparse reward.
        w_max: cap on a weight; w_max = 1 gives GDPO exactly.
        tau: reward k is active in group g when sum_{i in g} |Z[i, k]| > tau.
        static_weights: Tensor[K] replacing the density weights (the static-weight control).
        final_norm, final_eps, lengths: as in gdpo.

    Returns:
        (Tensor[N] float32 advantages, dict with rho: Tensor[K] density, w: Tensor[K] weights,
         active_groups: Tensor[K] number of groups where each reward is active, num_groups: int)
    """
    if variant not in ("asym", "sym"):
        raise ValueError(f"variant must be 'asym' or 'sym', got {variant!r}")
    z = per_reward_zscores(components, group_ids, group_eps)
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1
    abs_sum = torch.zeros(num_groups, z.shape[1], dtype=z.dtype).index_add_(0, inverse, z.abs())
    active = (abs_sum > tau).sum(0).to(z.dtype)                      # [K]
    rho = active / num_groups
    rho_ref = rho.max()
    w = torch.where(rho > 0, torch.clamp(torch.sqrt(rho_ref / rho.clamp(min=1e-30)), max=w_max), torch.ones_like(rho))
    if static_weights is not None:
        w = static_weights.to(z.dtype)
    if variant == "sym":
        s = z @ w
    else:
        s = (z + (w - 1.0) * z.clamp(min=0.0)).sum(1)
    adv = batch_normalize(s, final_norm, final_eps, lengths).to(torch.float32)
    return adv, {"rho": rho.float(), "w": w.float(), "active_groups": active.long(), "num_groups": num_groups}
