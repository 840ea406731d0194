"""TCPO: turn-level credit from verifier score histories in multi-turn verify-and-refine.

Retrospective credit (improvement over the best earlier turn, a bonus for preserving a solution, a penalty for
regressing from one), hindsight credit for non-improving turns (how good the trajectory's future turned out,
relative to peers of the same prompt at the same turn), optionally refined by a fixed-history counterfactual
(the turn's score minus the mean score of alternative outputs sampled for that turn), normalised within each
(prompt, turn index) group and discounted by an early-turn prior gamma^(k-1).

Preservation and regression need turns after a solution: run with --episode_end max_turns (the default for
--algo tcpo; issue 18: the paper "assigns turn credit in verifier-guided refinement where the model keeps refining
for a fixed number of turns"). Under --episode_end success the turns after a success are NaN and get no credit.

Where each term comes from. credo holds no copy of the paper, only the technical summary of it in issue 4 ("#4
step N" below: the five numbered steps of its "Public function" section) and the follow-up issue 18 ("#18 item N").
No paper equation numbers are cited because credo has none to check them against. The paper has no public code,
and #4 says of its own values "these defaults are our reading of it": so every coefficient's default is credo's
reading, each a flag, and so is every choice both issues are silent on (marked "credo's reading" in the code).
- prior best m, improvement, preservation, regression: #4 steps 1-2, word for word (defaults beta_pres 0.1,
  beta_reg 1.0, tau 1.0: credo's reading). "Solved" = m >= --tcpo_tau.
- prior best before the first turn (--tcpo_first_turn_prior): "zero" (default) is #4 step 1's "0 for the first
  turn", so any partial first turn is an "improvement" of r[i, 1]; "none" is #18 item 3's alternative ("no
  retrospective credit at turn 1"); that such a first turn, having nothing to improve on, is eligible for
  hindsight is credo's reading.
- eligible turns for the delayed credit: non-improving (d <= 0) and before success (m < tau), #4 step 3; #18 item 3
  restates it for the counterfactual candidates ("eligible turns (non-improving and before success), as the paper
  defines them"). The hindsight peers and the counterfactual candidates (rl/methods/tcpo_counterfactuals.py) are eligible turns
  only, and a counterfactual passed for any other turn is ignored.
- hindsight with peers: #4 step 3. Counterfactual mix (--tcpo_cf_mix 0.5): #4 step 4.
- (prompt, turn) normalisation and the early-turn prior (--tcpo_gamma 0.9): #4 step 5.
- turns after an episode ended (NaN): #4 "the result is 0 there"; leaving them out of every statistic (prior
  best, future best, peers, the normalisation groups) is credo's reading.
"""
import torch

from rl.advantages.stats import group_zscore

FIRST_TURN_PRIORS = ("zero", "none")


def _prior_best(scores: torch.Tensor) -> torch.Tensor:
    """m[i, k] = max_{t<k} r[i, t] (NaN turns ignored), 0 for the first turn. Tensor[N, T] -> Tensor[N, T].

    #4 step 1: "prior best m = max_{t<k} r[i, t], 0 for the first turn". NaN turns ignored: credo's reading (they
    only trail an ended episode, so they never lie before a present turn)."""
    filled = torch.nan_to_num(scores, nan=float("-inf"))
    running = torch.cummax(filled, dim=1).values
    prior = torch.cat([torch.full_like(running[:, :1], float("-inf")), running[:, :-1]], dim=1)
    return torch.where(torch.isinf(prior), torch.zeros_like(prior), prior)


def _future_best(scores: torch.Tensor) -> torch.Tensor:
    """u[i, k] = max_{t>=k} r[i, t] over present turns. Tensor[N, T] -> Tensor[N, T].

    #4 step 3: "future best u = max_{t>=k} r[i, t]" (turn k itself included). Under --episode_end success a solved
    trajectory's future ends at its success: u is the success's score, as if the answer had been kept (credo's
    reading)."""
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
    # #4 step 3: "eligible turns only (non-improving and not solved before: d <= 0 and m < tau)"
    eligible = present & (r <= m) & (m < tau)
    if first_turn_prior == "none":
        # credo's reading: with no prior a first turn can be neither improving nor solved before, so it is eligible
        # (#18 item 3 asks only for "no retrospective credit at turn 1")
        eligible[:, 0] = present[:, 0]
    return eligible


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
    d = torch.where(present, r - m, torch.zeros_like(r))  # #4 step 1: "d = r[i, k] - m"
    solved_before = m >= tau                                # #4 step 1: "solved before = m >= tau"
    zero = torch.zeros_like(r)
    # #4 step 2, the retrospective terms; beta_pres 0.1 and beta_reg 1.0 are credo's reading (#4: "these defaults
    # are our reading of it")
    imp = torch.where(present, d.clamp(min=0.0), zero)                                         # "imp = max(d, 0)"
    # "pres = beta_pres if solved before and r >= m"
    pres = torch.where(present & solved_before & (r >= m), torch.full_like(r, beta_pres), zero)
    # "reg = -beta_reg * (m - r) if solved before and r < m"
    reg = torch.where(present & solved_before & (r < m), -beta_reg * (m - r), zero)
    if first_turn_prior == "none":
        # #18 item 3's alternative to #4 step 1's m = 0: "no retrospective credit at turn 1"
        imp[:, 0] = pres[:, 0] = reg[:, 0] = 0.0

    eligible = eligible_turns(r, tau, first_turn_prior)
    u = _future_best(r)
    # #4 step 3: "hind = lambda_hind * (u - mean of u over the other eligible trajectories of the same prompt at the
    # same turn index); 0 when there is no such peer" (lambda_hind 1.0: credo's reading)
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

    # #4 step 4: where the counterfactual is finite (the caller leaves NaN where the alternatives all scored the
    # same) "delayed = (1 - cf_mix) * hind + cf_mix * cf; elsewhere delayed = hind" (cf_mix 0.5: credo's reading).
    # Eligible turns only: #4 step 4 "refines the hindsight term", which only eligible turns have, and #18 item 3
    # "the counterfactual candidates must be eligible turns"
    cf = zero.clone()
    delayed = hind
    if counterfactual is not None:
        cf_present = eligible & torch.isfinite(counterfactual)
        cf = torch.where(cf_present, counterfactual.to(r.dtype), zero)
        delayed = torch.where(cf_present, (1 - cf_mix) * hind + cf_mix * cf, hind)

    # #4 step 5: "C = ret + delayed (each part switchable off for ablations)", with "ret = imp + pres + reg" (step 2)
    credit = (imp + pres + reg) * float(use_retro) + delayed * float(use_hind)
    # #4 step 5: normalise "within each (prompt, turn index) group: (C - mean) / (sample std + eps), 0 for a group of
    # one or a constant group; then multiply by gamma ** (k - 1) (k counted from 1)" (here k counts from 0, so
    # gamma ** k; gamma 0.9: credo's reading). A group holds the present turns only: a turn after an episode ended
    # is in no group and stays 0 (#4: "the result is 0 there"; leaving it out of the statistics: credo's reading)
    adv = zero.clone()
    for k in range(t):
        col = present[:, k]
        if col.any():
            adv[col, k] = group_zscore(credit[col, k], group_ids[col], eps) * gamma ** k
    adv = adv.to(torch.float32)
    if return_parts:
        return adv, {"imp": imp, "pres": pres, "reg": reg, "hind": hind, "cf": cf}
    return adv
