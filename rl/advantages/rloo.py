"""RLOO: the REINFORCE leave-one-out advantage (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style
Optimization for Learning from Human Feedback in LLMs"), as OpenRLHF's `rloo` estimator and TRL's RLOOTrainer
compute it: each response's baseline is the mean reward of the *other* responses to the same prompt, and no std
scaling is applied."""
import torch

from rl.advantages.stats import group_mean_std


def rloo(scores: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Leave-one-out advantage.

    Args:
        scores: Tensor[N] float, one scalar reward per response.
        group_ids: Tensor[N] long, responses with the same id were sampled from the same prompt.
    Returns:
        Tensor[N] float32: A_i = r_i - (sum_{j in g(i)} r_j - r_i) / (|g(i)| - 1) = |g| / (|g| - 1) (r_i - mean_g);
        a group of one gets 0.
    """
    scores = scores.to(torch.float64)
    mean, _, count = group_mean_std(scores, group_ids)
    adv = (scores - mean) * count / (count - 1).clamp(min=1)
    return torch.where(count < 2, torch.zeros_like(adv), adv).to(torch.float32)
