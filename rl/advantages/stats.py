"""Per-group and batch statistics shared by the group-relative estimators. NaN entries (abstentions) are left
out of every statistic."""
import torch


def group_mean_std(values: torch.Tensor, group_ids: torch.Tensor):
    """Mean, sample std (n-1) and size of each element's group over its finite members, broadcast back.

    Args:
        values: Tensor[N] float; NaN marks an abstention, which counts in no statistic.
        group_ids: Tensor[N] long (any integers; they need not be contiguous).

    Returns:
        (mean, std, count), each Tensor[N]. std is 0 for a group with fewer than two finite members; mean is 0
        for a group with none.
    """
    if values.shape != group_ids.shape or values.dim() != 1:
        raise ValueError(f"values {tuple(values.shape)} and group_ids {tuple(group_ids.shape)} must be equal 1-D shapes")
    present = ~torch.isnan(values)
    filled = torch.where(present, values, torch.zeros_like(values))
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    zeros = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    count = zeros.index_add(0, inverse, present.to(values.dtype))
    mean = zeros.index_add(0, inverse, filled) / count.clamp(min=1)
    sq_dev = torch.where(present, (values - mean[inverse]) ** 2, torch.zeros_like(values))
    ss = zeros.index_add(0, inverse, sq_dev)
    var = torch.where(count > 1, ss / (count - 1).clamp(min=1), zeros)
    return mean[inverse], var.sqrt()[inverse], count[inverse]


def group_zscore(values: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(v - group mean) / (group sample std + eps); exactly 0 for constant groups, groups of one, and NaN entries.

    Tensor[N] -> Tensor[N] (float64 inside, so that a constant group never leaks rounding noise / eps).
    """
    v = values.to(torch.float64)
    mean, std, count = group_mean_std(v, group_ids)
    z = (v - mean) / (std + eps)
    degenerate = (count < 2) | (std == 0) | torch.isnan(v)
    return torch.where(degenerate, torch.zeros_like(z), z)


def batch_normalize(s: torch.Tensor, mode: str, eps: float = 1e-6, lengths: torch.Tensor = None) -> torch.Tensor:
    """Final whitening over the whole batch (all ranks).

    mode "response": (s - mean) / (sample std + eps) over responses;
         "token": every response counted once per valid token (`lengths`, Tensor[N]); token mean and unbiased
                  token variance, (s - mean) / sqrt(var + 1e-8) (verl's masked whitening);
         "none": s unchanged.
    """
    if mode == "none":
        return s
    if mode == "response":
        if s.numel() < 2:
            return torch.zeros_like(s)
        return (s - s.mean()) / (s.std(unbiased=True) + eps)
    if mode == "token":
        if lengths is None:
            raise ValueError("final_norm='token' needs the response lengths")
        w = lengths.to(s.dtype)
        total = w.sum()
        mean = (w * s).sum() / total
        var = (w * (s - mean) ** 2).sum() / (total - 1).clamp(min=1)
        return (s - mean) / torch.sqrt(var + 1e-8)
    raise ValueError(f"final_norm must be 'response', 'token' or 'none', got {mode!r}")


def last_present(scores: torch.Tensor) -> torch.Tensor:
    """Score of each trajectory's last turn. Tensor[N, T] (NaN = no turn) -> Tensor[N]."""
    return scores.gather(1, last_index(scores).unsqueeze(1)).squeeze(1)


def last_index(scores: torch.Tensor) -> torch.Tensor:
    """Index of each trajectory's last present turn. Tensor[N, T] -> Tensor[N] long."""
    return (~torch.isnan(scores)).long().cumsum(1).argmax(1)
