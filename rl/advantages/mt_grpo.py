"""MT-GRPO (Zeng et al. 2025): the trajectory outcome advantage plus a turn-level advantage on each turn."""
import torch

from rl.advantages.registry import register
from rl.advantages.stats import group_zscore


def last_present(scores: torch.Tensor) -> torch.Tensor:
    """Score of each trajectory's last turn. Tensor[N, T] (NaN = no turn) -> Tensor[N]."""
    present = ~torch.isnan(scores)
    last = present.long().cumsum(1).argmax(1)  # index of the last present turn
    return scores.gather(1, last.unsqueeze(1)).squeeze(1)


@register("mt_grpo")
def mt_grpo(scores: torch.Tensor, group_ids: torch.Tensor, outcome: torch.Tensor = None, lam: float = 1.0,
            eps: float = 1e-6) -> torch.Tensor:
    """Turn advantages A[i, k] = z_group(outcome)[i] + lam * z_(group, turn k)(r[:, k])[i].

    Args:
        scores: Tensor[N, T] turn scores, NaN where trajectory i has no turn k.
        group_ids: Tensor[N] long.
        outcome: Tensor[N] trajectory reward (default: the score of its last turn).
        lam: weight of the turn-level term (--mt_grpo_lambda).

    Returns:
        Tensor[N, T] float32, 0 where scores is NaN.
    """
    r = scores.to(torch.float64)
    present = ~torch.isnan(r)
    outcome = last_present(r) if outcome is None else outcome.to(torch.float64)
    adv = group_zscore(outcome, group_ids, eps).unsqueeze(1).expand_as(r).clone()
    for k in range(r.shape[1]):
        col = present[:, k]
        if col.any():
            adv[col, k] += lam * group_zscore(r[col, k], group_ids[col], eps)
    return torch.where(present, adv, torch.zeros_like(adv)).to(torch.float32)
