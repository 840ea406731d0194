"""GD²PO-Hard: GDPO with conflicting responses dropped and each query weighted by the share it keeps (Liu et al.
2026, "GD²PO: Mitigating Multi-Reward Conflicts via Group-Dynamic reward-Decoupled Policy Optimization", arXiv
2606.16771; code: Qwen-Applications/GD2PO, commit f1ad765, the estimator `gdpo_filter_group_ratio` that its
scripts/*/train_gd2po_hard.sh run).

With Z[i, k] the group z-score of reward k (sample std + 1e-6, as GDPO), a response is *in conflict* when one of its
weighted terms w_k Z[i, k] is > 1e-8 and another is < -1e-8 (a zero term is neutral). Conflicting responses get
advantage 0 and leave the batch normalisation; q_g, the kept share of query g's responses, weights the rest:

    S_i = sum_k w_k Z[i, k];   keep_i = not conflict_i;   q_g = mean_{i in g} keep_i.

Where the two codes differ, each reading is a setting (both codes use w_k = 1):

- Where q_g is applied (`weight_at`):
  "advantage": A = normalise_kept(q_g S) (Qwen-Applications/GD2PO tool-calling/verl/trainer/ppo/ray_trainer.py:
      the advantage is scaled by q_g *before* the masked whitening, "so whiten won't erase the ratio");
  "loss": A = q_g normalise_kept(S) (zhaihaotian/DARA's port, commit 0459102, multi_reward_algos.py and
      math/rdgdpo/advantages.py: q_g multiplies the clipped PPO surrogate after whitening, the token count in the
      denominator unchanged). q_g >= 0 and every --loss_mode is positively homogeneous in the advantage
      (rl/update/loss.py: vanilla with its dual clip, GSPO, CISPO, SAPO, whose gate reads only A's sign), so q_g on
      the advantage equals q_g on the policy loss; the KL term, as in the DARA code, is not weighted.
- Response- vs token-level normalisation (`final_norm`, rl/advantages/stats.batch_normalize over the kept responses):
  both tool-calling codes whiten over the kept tokens ("token", verl's masked_whiten); DARA's math code
  normalises the kept responses, each counted once ("response", std + 1e-6); credo's default is "response", as for
  GDPO and DARA.
- More than two rewards: DARA's code takes exactly two; the GD²PO code runs Hard on two or three (correctness,
  format, length) with the same any-positive-and-any-negative rule, which is the rule here for any K >= 2.
- Where the sign is read: the GD²PO code reads Z[i, k] summed over the response's tokens (Z x length), DARA's code
  and credo read Z[i, k]; the two differ only for |Z| within 1e-8 of zero.
- credo's readings (no code to follow): the rule is read on the weighted terms w_k Z[i, k] (a zero weight switches
  a reward off, a negative one flips it); an abstained reward (NaN) has Z = 0 and is neutral.
"""
import torch

from rl.advantages.gdpo import per_reward_zscores
from rl.advantages.stats import batch_normalize

WEIGHT_AT = ("advantage", "loss")


def gd2po_hard(components: torch.Tensor, group_ids: torch.Tensor, weights: torch.Tensor = None,
               weight_at: str = "advantage", sign_eps: float = 1e-8, group_eps: float = 1e-6,
               final_norm: str = "response", final_eps: float = 1e-6, lengths: torch.Tensor = None):
    """GD²PO-Hard advantage.

    Args:
        components: Tensor[N, K] rewards (NaN = abstained); group_ids: Tensor[N] long.
        weights: Tensor[K] (default all 1, both authors' codes).
        weight_at: "advantage" (the GD²PO authors' code) | "loss" (the DARA authors' port); module docstring.
        sign_eps: a term counts as positive above sign_eps and negative below -sign_eps (both codes: 1e-8).
        final_norm, final_eps: as in gdpo, over the kept responses only; "token" needs lengths: Tensor[N].

    Returns:
        (Tensor[N] float32 advantages, 0 on dropped responses, dict with
         keep: Tensor[N] bool, query_weight: Tensor[N] float q_g of each response's group,
         dropped_frac: float share of responses dropped, num_groups: int, groups_with_drops: int (q_g < 1),
         empty_groups: int (q_g = 0))
    """
    if weight_at not in WEIGHT_AT:
        raise ValueError(f"weight_at must be one of {WEIGHT_AT}, got {weight_at!r}")
    z = per_reward_zscores(components, group_ids, group_eps)
    w = torch.ones(z.shape[1], dtype=z.dtype) if weights is None else weights.to(z.dtype)
    if w.shape != (z.shape[1],):
        raise ValueError(f"weights must have one entry per reward ({z.shape[1]}), got {tuple(w.shape)}")
    terms = z * w
    conflict = (terms > sign_eps).any(1) & (terms < -sign_eps).any(1)
    keep = ~conflict
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1
    kept = torch.zeros(num_groups, dtype=z.dtype).index_add_(0, inverse, keep.to(z.dtype))
    size = torch.zeros(num_groups, dtype=z.dtype).index_add_(0, inverse, torch.ones_like(kept[inverse]))
    q_group = kept / size
    q = q_group[inverse]

    s = terms.sum(1)
    if weight_at == "advantage":
        s = s * q
    adv = torch.zeros_like(s)
    if keep.any():
        kept_lengths = None if lengths is None else lengths[keep]
        adv[keep] = batch_normalize(s[keep], final_norm, final_eps, kept_lengths)
    if weight_at == "loss":
        adv = adv * q
    info = {"keep": keep, "query_weight": q.float(), "dropped_frac": conflict.to(z.dtype).mean().item(),
            "num_groups": num_groups, "groups_with_drops": int((q_group < 1).sum().item()),
            "empty_groups": int((q_group == 0).sum().item())}
    return adv.to(torch.float32), info
