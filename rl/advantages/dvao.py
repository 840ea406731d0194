"""DVAO: several rewards combined by their in-group spread (Jiang et al. 2026, "Dynamic Variance-adaptive Advantage
Optimization", arXiv 2605.25604).

The estimator is the one the DARA authors run as their DVAO baseline (zhaihaotian/DARA, commit 0459102:
tool_calling/vendor/verl/verl/trainer/ppo/multi_reward_algos.py and math/rdgdpo/advantages.py, the same formula in
both; the DVAO paper's own equations were not read here). For a group g of responses and base weights w_k,

    A_i = sum_k w_k (r_ik - mu_gk) / sum_k w_k sigma_gk      (sigma: population std, ddof 0; the authors' code)

and A_i = 0 where the denominator is <= 1e-8 (no reward varies in the group). There is no batch normalisation after
it (the authors' code has none; --final_norm is not read).

Why "weighted by its spread" (credo's algebra, not a quotation): with z_ik = (r_ik - mu_gk) / sigma_gk,

    A_i = sum_k lambda_gk z_ik,   lambda_gk = w_k sigma_gk / sum_j w_j sigma_gj,   sum_k lambda_gk = 1,

so each reward's z-score is weighted by its share of the group's spread: a reward that varies more in a group is
up-weighted there, and a reward constant in the group gets weight 0. `dvao` reports the mean lambda per reward
(rl/methods/dvao.py logs it as dvao/w/<reward>).

Readings where the authors' code is silent (credo's, labelled): the authors' code takes exactly two rewards
(correctness and format or length) with base weights 0.5 / 0.5; here any K >= 2 rewards, base weights 1/K each
unless --reward_weights gives them (only their ratios matter: the scale cancels). An abstention (NaN) is left out
of that reward's group statistics and contributes 0.
"""
import torch

from rl.advantages.stats import group_mean_std


def dvao(components: torch.Tensor, group_ids: torch.Tensor, base_weights: torch.Tensor = None, eps: float = 1e-8):
    """DVAO advantage.

    Args:
        components: Tensor[N, K] rewards (NaN = abstained); group_ids: Tensor[N] long.
        base_weights: Tensor[K] non-negative with a positive sum (default 1/K each; the authors' code: 0.5, 0.5).
        eps: a group whose weighted spread sum_k w_k sigma_gk is <= eps gets advantage 0 (the authors' 1e-8).

    Returns:
        (Tensor[N] float32 advantages, dict with
         w: Tensor[K] float, the mean over live groups of lambda_gk (0 when no group is live),
         active_groups: Tensor[K] long, groups where reward k varies (sigma_gk > 0),
         live_groups: int, groups where the weighted spread exceeds eps, num_groups: int)
    """
    if components.dim() != 2 or components.shape[0] != group_ids.shape[0]:
        raise ValueError(f"components must be [N, K] with N = len(group_ids); got {tuple(components.shape)}")
    x = components.to(torch.float64)
    k = x.shape[1]
    w = torch.full((k,), 1.0 / k, dtype=x.dtype) if base_weights is None else base_weights.to(x.dtype)
    if w.shape != (k,) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"DVAO needs {k} non-negative base weights with a positive sum, got {w.tolist()}")
    centered, spread = torch.zeros_like(x), torch.zeros_like(x)
    for j in range(k):
        mean, sample_std, count = group_mean_std(x[:, j], group_ids)
        spread[:, j] = sample_std * torch.sqrt((count - 1).clamp(min=0) / count.clamp(min=1))  # population std
        centered[:, j] = torch.where(torch.isnan(x[:, j]), torch.zeros_like(mean), x[:, j] - mean)
    denominator = spread @ w                                         # [N], one value per group
    live = denominator > eps
    safe = torch.where(live, denominator, torch.ones_like(denominator))
    adv = torch.where(live, (centered @ w) / safe, torch.zeros_like(denominator))
    share = torch.where(live[:, None], spread * w / safe[:, None], torch.zeros_like(spread))  # lambda, per row

    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1
    size = torch.zeros(num_groups, dtype=x.dtype).index_add_(0, inverse, torch.ones_like(denominator))
    per_group = torch.zeros(num_groups, k, dtype=x.dtype).index_add_(0, inverse, share) / size[:, None]
    group_live = torch.zeros(num_groups, dtype=x.dtype).index_add_(0, inverse, live.to(x.dtype)) > 0
    group_spread = torch.zeros(num_groups, k, dtype=x.dtype).index_add_(0, inverse, spread) / size[:, None]
    live_groups = int(group_live.sum().item())
    mean_share = per_group[group_live].sum(0) / max(live_groups, 1)
    info = {"w": mean_share.float(), "active_groups": (group_spread > 0).sum(0).long(), "live_groups": live_groups,
            "num_groups": num_groups}
    return adv.to(torch.float32), info
