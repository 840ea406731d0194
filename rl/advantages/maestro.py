"""MAESTRO: per-response reward mixing chosen by a learned Conductor, then the GRPO group advantage.

The Conductor itself (a policy over reward-emphasis actions, trained by REINFORCE) lives in rl/conductor.py and the
training-step glue in rl/methods/maestro.py; this module is the pure maths of one step.

What the paper specifies: a discrete reward-emphasis action per response, sampled from pi(. | h), that induces the
response's weight configuration, and the GRPO group advantage of the scalarised reward as the Conductor's
meta-reward. What it does not give in its text: the map from an action to the weights. credo's reading:
w(a) = (1 - eta) / K + eta * onehot(a), eta = --maestro_emphasis (default 0.5): the chosen reward gets eta on top
of an equal share, so every reward keeps some weight (eta = 1 is pure emphasis, eta = 0 is `equal`).
"""
import torch

from rl.advantages.grpo import grpo
from rl.advantages.registry import register


def emphasis_weights(actions: torch.Tensor, num_rewards: int, eta: float = 0.5) -> torch.Tensor:
    """w(a) = (1 - eta) / K + eta * onehot(a) (credo's reading; the paper's text gives no formula).
    actions: Tensor[N] long -> Tensor[N, K]; each row sums to 1."""
    onehot = torch.nn.functional.one_hot(actions.long(), num_rewards).to(torch.float32)
    return (1.0 - eta) / num_rewards + eta * onehot


def mixed_reward(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-response scalar w . r. rewards: Tensor[N, K] in [0, 1] (NaN = abstained, counts 0); weights: [N, K] or [K]."""
    return (torch.nan_to_num(rewards.to(torch.float32), nan=0.0) * weights.to(torch.float32)).sum(-1)


@register("maestro")
def maestro(rewards: torch.Tensor, actions: torch.Tensor, group_ids: torch.Tensor, eta: float = 0.5,
            scale: str = "group") -> torch.Tensor:
    """MAESTRO advantage.

    Args:
        rewards: Tensor[N, K], the K rewards of each response on a [0, 1] scale (NaN = abstained, counts 0).
        actions: Tensor[N] long, the emphasis action each response drew from the Conductor (heterogeneous
            sampling: responses of one group may draw different actions); None mixes with equal weights 1/K.
        group_ids: Tensor[N] long.
        eta: emphasis strength (credo's reading, default 0.5; 1.0 = all weight on the chosen reward).
        scale: GRPO's std scaling ("group", "batch", "none").

    Returns:
        Tensor[N] float32: grpo(w(a_i) . r_i).
    """
    k = rewards.shape[1]
    weights = emphasis_weights(actions, k, eta) if actions is not None else torch.full((k,), 1.0 / k)
    return grpo(mixed_reward(rewards, weights), group_ids, scale=scale)
