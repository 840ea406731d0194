"""GDPO: group-decoupled normalisation of several rewards (each reward z-scored in its own group first)."""
import torch

from rl.advantages.stats import batch_normalize, group_zscore


def per_reward_zscores(components: torch.Tensor, group_ids: torch.Tensor, group_eps: float = 1e-6) -> torch.Tensor:
    """Z[:, k] = group z-score of reward k (sample std); NaN (abstained) entries and degenerate groups give 0.

    Tensor[N, K] -> Tensor[N, K] float64.
    """
    if components.dim() != 2 or components.shape[0] != group_ids.shape[0]:
        raise ValueError(f"components must be [N, K] with N = len(group_ids); got {tuple(components.shape)}")
    return torch.stack([group_zscore(components[:, k], group_ids, group_eps) for k in range(components.shape[1])], dim=1)


def gdpo(components: torch.Tensor, group_ids: torch.Tensor, weights: torch.Tensor = None, group_eps: float = 1e-6,
         final_norm: str = "response", final_eps: float = 1e-6, lengths: torch.Tensor = None) -> torch.Tensor:
    """GDPO advantage.

    Args:
        components: Tensor[N, K], reward k of response i; NaN where a reward abstained (it is left out of that
            reward's group statistics and contributes 0).
        group_ids: Tensor[N] long.
        weights: Tensor[K] (default all 1).
        final_norm: "response" | "token" | "none", over the whole batch (see stats.batch_normalize);
            "token" needs lengths: Tensor[N] valid response tokens.

    Returns:
        Tensor[N] float32: normalise(sum_k w_k Z[:, k]).
    """
    z = per_reward_zscores(components, group_ids, group_eps)
    w = torch.ones(z.shape[1], dtype=z.dtype) if weights is None else weights.to(z.dtype)
    if w.shape != (z.shape[1],):
        raise ValueError(f"weights must have one entry per reward ({z.shape[1]}), got {tuple(w.shape)}")
    return batch_normalize(z @ w, final_norm, final_eps, lengths).to(torch.float32)
