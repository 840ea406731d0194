"""DARA: density-aware reward weights on top of GDPO (Sym and Asym variants), and its diagnostics.

A reward that is "active" (non-constant) in few groups gets a larger weight, up to w_max, so that sparse
signals are not drowned by dense ones: w_k = min(w_max, sqrt(rho_ref / rho_k)).

Why the square root (the energy view; credo's reading of the issue's "energy analysis", DARA section A.2, whose text
is not recorded in this repository): with the sample std, a group of G responses in which reward k is active has
sum_i Z[i, k]^2 = G - 1 (up to the eps of the z-score) and an inactive group 0, so reward k's advantage energy
E_k = sum_i Z[i, k]^2 is about (G - 1) x active_groups_k, proportional to its density rho_k. The weight w_k^2 =
rho_ref / rho_k then gives every reward the energy of the densest one, until the cap binds (rho_k < rho_ref / w_max^2),
which is where a sparse reward stays under-weighted. `dara_diagnostics` reports these quantities per reward.
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
         active_groups: Tensor[K] number of groups where each reward is active, num_groups: int, and the diagnostics
         of `dara_diagnostics`: energy, weighted_energy (Tensor[K] float) and cap_binds (Tensor[K] bool))
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
    uncapped = torch.sqrt(rho_ref / rho.clamp(min=1e-30))
    w = torch.where(rho > 0, torch.clamp(uncapped, max=w_max), torch.ones_like(rho))
    if static_weights is not None:
        w = static_weights.to(z.dtype)
    contributions = weighted_contributions(z, w, variant)               # [N, K]
    adv = batch_normalize(contributions.sum(1), final_norm, final_eps, lengths).to(torch.float32)
    info = {"rho": rho.float(), "w": w.float(), "active_groups": active.long(), "num_groups": num_groups}
    # the cap binds where the density weight asked for more than w_max (never for a static weight or a silent reward)
    cap_binds = (rho > 0) & (uncapped > w_max) if static_weights is None else torch.zeros_like(rho, dtype=torch.bool)
    info.update(dara_diagnostics(z, contributions, cap_binds))
    return adv, info


def weighted_contributions(z: torch.Tensor, w: torch.Tensor, variant: str) -> torch.Tensor:
    """Each reward's term of the pre-normalisation advantage S = sum_k C[:, k].

    Tensor[N, K] z-scores, Tensor[K] weights -> Tensor[N, K]: sym C = w_k Z_k; asym C = Z_k + (w_k - 1) max(Z_k, 0).
    """
    if variant == "sym":
        return z * w
    return z + (w - 1.0) * z.clamp(min=0.0)


def dara_diagnostics(z: torch.Tensor, contributions: torch.Tensor, cap_binds: torch.Tensor) -> dict:
    """Per-reward energy of the advantage (module docstring), before and after DARA's weights.

    Args:
        z: Tensor[N, K] per-reward group z-scores; contributions: Tensor[N, K] (weighted_contributions);
        cap_binds: Tensor[K] bool, the weight was clipped at w_max.
    Returns:
        energy: Tensor[K] sum_i Z[i, k]^2 (about (G - 1) x active groups); weighted_energy: Tensor[K]
        sum_i C[i, k]^2 (credo's reading: the energy each reward brings to S, which DARA-Sym equalises while the cap
        does not bind); cap_binds: Tensor[K] bool.
    """
    return {"energy": (z ** 2).sum(0).float(), "weighted_energy": (contributions ** 2).sum(0).float(),
            "cap_binds": cap_binds}
