"""Per-group statistics shared by the group-relative estimators."""
import torch


def group_mean_std(values: torch.Tensor, group_ids: torch.Tensor):
    """Mean, sample std (n-1) and size of each element's group, broadcast back to the elements.

    Args:
        values: Tensor[N] float.
        group_ids: Tensor[N] long (any integers; they need not be contiguous).

    Returns:
        (mean, std, count), each Tensor[N]. std is 0 for a group of one.
    """
    if values.shape != group_ids.shape or values.dim() != 1:
        raise ValueError(f"values {tuple(values.shape)} and group_ids {tuple(group_ids.shape)} must be equal 1-D shapes")
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    count = torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, torch.ones_like(values))
    total = torch.zeros_like(count).index_add_(0, inverse, values)
    mean = total / count
    sq_dev = (values - mean[inverse]) ** 2
    ss = torch.zeros_like(count).index_add_(0, inverse, sq_dev)
    var = torch.where(count > 1, ss / (count - 1).clamp(min=1), torch.zeros_like(ss))
    return mean[inverse], var.sqrt()[inverse], count[inverse]
