"""GRPO: group-relative advantage (Shao et al. 2024), with the Dr.GRPO variant (Liu et al. 2025)."""
import torch

from rl.advantages.stats import group_mean_std


def grpo(scores: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6, scale: str = "group") -> torch.Tensor:
    """Group-relative advantage of each response.

    Args:
        scores: Tensor[N] float, one scalar reward per response.
        group_ids: Tensor[N] long, responses with the same id were sampled from the same prompt.
        eps: added to the std before dividing.
        scale: "group": (s - group mean) / (group sample std + eps);
               "batch": (s - group mean) / (sample std of all N scores + eps);
               "none":  s - group mean (Dr.GRPO, no std division).

    Returns:
        Tensor[N] float. A group whose scores are all equal, and a group of one, get exactly 0.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")
    scores = scores.to(torch.float64)
    mean, std, count = group_mean_std(scores, group_ids)
    centred = scores - mean
    # Exact zeros for degenerate groups: float noise in (s - mean) must not be amplified by 1 / eps.
    degenerate = (count < 2) | (std == 0)
    if scale == "group":
        adv = centred / (std + eps)
    elif scale == "batch":
        batch_std = scores.std(unbiased=True) if scores.numel() > 1 else scores.new_zeros(())
        adv = centred / (batch_std + eps)
    else:
        adv = centred
    return torch.where(degenerate, torch.zeros_like(adv), adv).to(torch.float32)
