"""The env's own numbers as step metrics: every StepResult component and numeric info entry, averaged over turns.

`env/<component>/mean` and `env/info/<key>/mean`, each the mean over every turn (on every rank) that reported it:
a key an env sets on some turns only is averaged over those turns, not diluted by the others (credo's reading;
verl's `reward_extra_info` is averaged the same way over the responses that carry it).
"""
import torch

from rl.engine import dist


def local_sums(env_values: list) -> dict:
    """{key: (sum, count)} over one rank's trajectories (N lists of per-turn dicts)."""
    sums = {}
    for turns in env_values or []:
        for values in turns:
            for key, value in values.items():
                total, count = sums.get(key, (0.0, 0))
                sums[key] = (total + value, count + 1)
    return sums


def env_metrics(env_values: list) -> dict:
    """Batch-global `env/<key>/mean` metrics; the key set is the union over ranks, so every rank reduces the same
    tensor."""
    local = local_sums(env_values)
    names = sorted({k for keys in dist.all_gather_object(sorted(local)) for k in keys})
    if not names:
        return {}
    stacked = torch.tensor([local.get(k, (0.0, 0)) for k in names], dtype=torch.float64)
    reduced = dist.all_reduce(stacked).tolist()
    return {f"env/{k}/mean": total / count for k, (total, count) in zip(names, reduced) if count}
