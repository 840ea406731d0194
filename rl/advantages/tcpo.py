"""TCPO: turn-level credit from verifier score histories in multi-turn verify-and-refine.

Retrospective credit (improvement over the best earlier turn, a bonus for preserving a solution, a penalty for
regressing from one), hindsight credit for non-improving turns (how good the trajectory's future turned out,
relative to peers of the same prompt at the same turn), optionally refined by a fixed-history counterfactual
(the turn's score minus the mean score of alternative outputs sampled for that turn), normalised within each
(prompt, turn index) group and discounted by an early-turn prior gamma^(k-1).

Preservation and regression need turns after a solution: run with --episode_end max_turns (the default for
--algo tcpo). Under --episode_end success the turns after a success are NaN and get no credit.

The paper has no public code. Every choice below is credo's reading of it, each a flag:
- prior best before the first turn (--tcpo_first_turn_prior): "zero" (default) takes m = 0, so any partial first
  turn is an "improvement" of r[i, 1]; "none" gives the first turn no retrospective credit, and, having nothing to
  improve on, it counts as eligible for hindsight (its credit is how its future went).
- preservation bonus and regression penalty (--tcpo_beta_pres 0.1, --tcpo_beta_reg 1.0): pres = beta_pres when
  solved before and r >= m; reg = -beta_reg * (m - r) when solved before and r < m. "Solved" = m >= --tcpo_tau.
- eligible turns for the delayed credit: non-improving (d <= 0) and before success (m < tau), the paper's
  definition; the hindsight peers and the counterfactual candidates (rl/counterfactual.py) are eligible turns only,
  and a counterfactual passed for any other turn is ignored.
- the counterfactual/hindsight mix (--tcpo_cf_mix 0.5): delayed = (1 - cf_mix) * hind + cf_mix * cf where a
  counterfactual exists, hind elsewhere.
- the early-turn prior (--tcpo_gamma 0.9): the normalised credit of turn k (from 1) is multiplied by gamma^(k-1).
"""
import torch

from rl.advantages.registry import register
from rl.advantages.stats import group_zscore

FIRST_TURN_PRIORS = ("zero", "none")


def _prior_best(scores: torch.Tensor) -> torch.Tensor:
    """m[i, k] = max_{t<k} r[i, t] (NaN turns ignored), 0 for the first turn. Tensor[N, T] -> Tensor[N, T]."""
    filled = torch.nan_to_num(scores, nan=float("-inf"))
    running = torch.cummax(filled, dim=1).values
    prior = torch.cat([torch.full_like(running[:, :1], float("-inf")), running[:, :-1]], dim=1)
    return torch.where(torch.isinf(prior), torch.zeros_like(prior), prior)


def _future_best(scores: torch.Tensor) -> torch.Tensor:
    """u[i, k] = max_{t>=k} r[i, t] over present turns. Tensor[N, T] -> Tensor[N, T]."""
    filled = torch.nan_to_num(scores, nan=float("-inf"))
    return torch.flip(torch.cummax(torch.flip(filled, [1]), dim=1).values, [1])


def eligible_turns(scores: torch.Tensor, tau: float = 1.0, first_turn_prior: str = "zero") -> torch.Tensor:
    """Tensor[N, T] bool: the turns that get delayed (hindsight / counterfactual) credit: present, non-improving
    (r <= prior best) and before success (prior best < tau). With first_turn_prior "none" every first turn is
    eligible (it has no prior to improve on)."""
    if first_turn_prior not in FIRST_TURN_PRIORS:
        raise ValueError(f"first_turn_prior must be one of {FIRST_TURN_PRIORS}, got {first_turn_prior!r}")
    r = scores.to(torch.float64)
    present = ~torch.isnan(r)
    m = _prior_best(r)
    eligible = present & (r <= m) & (m < tau)
    if first_turn_prior == "none":
        eligible[:, 0] = present[:, 0]
    return eligible


@register("tcpo")
def tcpo(scores: torch.Tensor, group_ids: torch.Tensor, *, tau: float = 1.0, beta_pres: float = 0.1,
         beta_reg: float = 1.0, lambda_hind: float = 1.0, gamma: float = 0.9, eps: float = 1e-6,
         counterfactual: torch.Tensor = None, cf_mix: float = 0.5, use_retro: bool = True,
         use_hind: bool = True, first_turn_prior: str = "zero", return_parts: bool = False):
    """Turn-level advantages.

    Args:
        scores: Tensor[N, T] verifier score r[i, k] in [0, 1] of turn k of trajectory i; NaN where the
            trajectory has no turn k (it stopped earlier).
        group_ids: Tensor[N] long, trajectories of the same prompt share an id.
        tau: a prior best >= tau means "solved before".
        beta_pres, beta_reg: preservation bonus and regression penalty scale.
        lambda_hind: scale of the hindsight term.
        gamma: early-turn prior, the advantage of turn k (from 1) is multiplied by gamma^(k-1).
        counterfactual: Tensor[N, T] or None; where finite, r[i, k] minus the mean score of alternatives sampled
            with the history fixed at that turn (the caller leaves NaN where the alternatives all scored the same);
            used on eligible turns only.
        cf_mix: weight of the counterfactual in the delayed term.
        use_retro, use_hind: ablation switches for the retrospective and the delayed (hindsight + cf) parts.
        first_turn_prior: "zero" (prior best 0 before turn 1) or "none" (no retrospective credit at turn 1, which
            is then eligible for hindsight); see the module docstring.
        return_parts: also return a dict of the raw parts (imp, pres, reg, hind, cf), each Tensor[N, T].

    Returns:
        Tensor[N, T] float32, 0 where scores is NaN (and the parts dict when return_parts).
    """
    r = scores.to(torch.float64)
    present = ~torch.isnan(r)
    n, t = r.shape
    m = _prior_best(r)
    d = torch.where(present, r - m, torch.zeros_like(r))
    solved_before = m >= tau
    zero = torch.zeros_like(r)
    imp = torch.where(present, d.clamp(min=0.0), zero)
    pres = torch.where(present & solved_before & (r >= m), torch.full_like(r, beta_pres), zero)
    reg = torch.where(present & solved_before & (r < m), -beta_reg * (m - r), zero)
    if first_turn_prior == "none":  # no prior to measure the first turn against: no retrospective credit there
        imp[:, 0] = pres[:, 0] = reg[:, 0] = 0.0

    eligible = eligible_turns(r, tau, first_turn_prior)
    u = _future_best(r)
    hind = zero.clone()
    for k in range(t):
        col = eligible[:, k]
        if not col.any():
            continue
        _, group = torch.unique(group_ids[col], return_inverse=True)
        uk = u[col, k]
        # mean of u over the *other* eligible trajectories of the same prompt: (group sum - own) / (count - 1),
        # with per-group sums (linear in N; an [E, E] same-prompt matrix took 1.4 s at N = 16384)
        count = torch.zeros(int(group.max()) + 1, dtype=r.dtype).index_add_(0, group, torch.ones_like(uk))[group]
        total = torch.zeros(int(group.max()) + 1, dtype=r.dtype).index_add_(0, group, uk)[group]
        peers = count - 1
        peer_mean = (total - uk) / peers.clamp(min=1)
        hind[col, k] = torch.where(peers > 0, lambda_hind * (uk - peer_mean), torch.zeros_like(uk))

    cf = zero.clone()
    delayed = hind
    if counterfactual is not None:
        cf_present = eligible & torch.isfinite(counterfactual)
        cf = torch.where(cf_present, counterfactual.to(r.dtype), zero)
        delayed = torch.where(cf_present, (1 - cf_mix) * hind + cf_mix * cf, hind)

    credit = (imp + pres + reg) * float(use_retro) + delayed * float(use_hind)
    adv = zero.clone()
    for k in range(t):
        col = present[:, k]
        if col.any():
            adv[col, k] = group_zscore(credit[col, k], group_ids[col], eps) * gamma ** k
    adv = adv.to(torch.float32)
    if return_parts:
        return adv, {"imp": imp, "pres": pres, "reg": reg, "hind": hind, "cf": cf}
    return adv
