"""MAESTRO: per-response reward mixing chosen by a learned Conductor, then the GRPO group advantage.

The Conductor itself (a policy over reward-emphasis actions, trained by REINFORCE) lives in rl/methods/maestro_conductor.py and the
training-step glue in rl/methods/maestro.py; this module is the pure maths of one step.

What the paper specifies: a discrete reward-emphasis action per response, sampled from pi(. | h), that induces the
response's weight configuration, and the GRPO group advantage of the scalarised reward as the Conductor's
meta-reward. What it does not give in its text: the map from an action to the weights. credo's reading:
w(a) = (1 - eta) / K + eta * onehot(a), eta = --maestro_emphasis (default 0.5): the chosen reward gets eta on top
of an equal share, so every reward keeps some weight (eta = 1 is pure emphasis, eta = 0 is `equal`).

The scale of the rewards the Conductor compares (`scale_rewards`, --maestro_reward_scale). Response i draws a_i, so
s_i = (1 - eta)/K sum_k r_ik + eta r_{i,a_i}, and with a context-only input (actions independent of the response)
    E[s_i - mean_group(s) | a_i = k] = eta (1 - 1/G) (mu_k - sum_j pi_j mu_j),    mu_k = E[r_k | context].
The Conductor's meta-reward therefore ranks the actions by each reward's mean *level* in that context: with GRPO's
std scaling off (--scale_rewards none) exactly this, linear in every reward's offset and unit; with it, divided by
the group's std of s (experiments/results/mechanisms_maestro_scales.md measures both). The paper (issue 6: "`ppl`,
`ent` (and `pref`) are rank-normalised to [0, 1] within each group before they are mixed") puts each reward on
[0, 1] but leaves the levels unequal: a group rank has mean 0.5 in every group, `fmt` and `len` their own, so a
reward whose level is simply higher wins every context (the issue-19 sweep: `len` at mean 0.72 against 0.5, pi 0.999
on `len` for both prompt kinds). credo's reading, the default `batch_rank`: every reward is replaced by its rank
in the batch, scaled to [0, 1] (ties share their mean rank), so every reward has batch mean 0.5 and the Conductor
compares how far a prompt kind's responses sit above each reward's batch average, invariant to any increasing
transform (shift, stretch) of a reward. `none` keeps the rewards as given (the paper's scales).

Equal levels are not the whole story under GRPO's std scaling (--scale_rewards group, the default). Dividing by the
group's std makes a small margin earn about as much advantage as a large one (at G = 2 exactly: A = +-1/sqrt(2), the
sign of s_1 - s_2), so the meta-reward counts how often emphasising k lifts a response above its group, not by how
much. At equal batch means a reward whose ranks sit mostly above 0.5 with a few far below (a tied block at its top:
`len` once most responses are at or under --len_min tokens) is favoured, and one with a tied block at its bottom
(`fmt` while most responses fail it) disfavoured (experiments/mechanisms/maestro_shape.py; on a real run's batches,
maestro_meta_reward.py). That bias is small beside the noise of the Conductor's own action draws at the small
recipe's learning rate (issue 42: README, MAESTRO). --maestro_meta_reward centred (credo's reading,
rl/methods/maestro.py) gives the Conductor s_i - mean_group(s), where the level formula above is exact.
"""
import torch

from rl.advantages.grpo import grpo

REWARD_SCALES = ("batch_rank", "none")


def emphasis_weights(actions: torch.Tensor, num_rewards: int, eta: float = 0.5) -> torch.Tensor:
    """w(a) = (1 - eta) / K + eta * onehot(a) (credo's reading; the paper's text gives no formula).
    actions: Tensor[N] long -> Tensor[N, K]; each row sums to 1."""
    onehot = torch.nn.functional.one_hot(actions.long(), num_rewards).to(torch.float32)
    return (1.0 - eta) / num_rewards + eta * onehot


def batch_rank(values: torch.Tensor) -> torch.Tensor:
    """Each column's rank over the batch, scaled to [0, 1] (lowest 0, highest 1, ties share their mean rank, a lone
    or constant column 0.5); NaN (abstained) stays NaN and is not ranked. Sort-based, O(N log N) per column.
    Tensor[N, K] -> Tensor[N, K] float32."""
    out = torch.full(values.shape, float("nan"), dtype=torch.float64)
    for j in range(values.shape[1]):
        col = values[:, j].detach().to(torch.float64).cpu()
        keep = (~torch.isnan(col)).nonzero().squeeze(1)
        if len(keep) == 0:
            continue
        uniq, inverse, counts = torch.unique(col[keep], return_inverse=True, return_counts=True)  # uniq is sorted
        below = torch.cumsum(counts, 0) - counts                                            # members strictly lower
        mean_rank = (below + (counts - 1) / 2).to(torch.float64)[inverse]
        out[keep, j] = mean_rank / (len(keep) - 1) if len(keep) > 1 else torch.full_like(mean_rank, 0.5)
    return out.to(torch.float32).to(values.device)


def scale_rewards(rewards: torch.Tensor, how: str = "batch_rank") -> torch.Tensor:
    """The rewards on the scale the Conductor compares them on (module docstring): `batch_rank` (credo's reading)
    or `none` (as given). rewards: Tensor[N, K] of the whole batch (every rank's rows) -> Tensor[N, K]."""
    if how == "none":
        return rewards
    if how == "batch_rank":
        return batch_rank(rewards)
    raise ValueError(f"reward scale must be one of {REWARD_SCALES}, got {how!r}")


def mixed_reward(rewards: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-response scalar w . r. rewards: Tensor[N, K] (NaN = abstained, counts 0); weights: [N, K] or [K]."""
    return (torch.nan_to_num(rewards.to(torch.float32), nan=0.0) * weights.to(torch.float32)).sum(-1)


def maestro(rewards: torch.Tensor, actions: torch.Tensor, group_ids: torch.Tensor, eta: float = 0.5,
            scale: str = "group", reward_scale: str = "batch_rank") -> torch.Tensor:
    """MAESTRO advantage.

    Args:
        rewards: Tensor[N, K], the K rewards of each response of the whole batch (NaN = abstained, counts 0).
        actions: Tensor[N] long, the emphasis action each response drew from the Conductor (heterogeneous
            sampling: responses of one group may draw different actions); None mixes with equal weights 1/K.
        group_ids: Tensor[N] long.
        eta: emphasis strength (credo's reading, default 0.5; 1.0 = all weight on the chosen reward).
        scale: GRPO's std scaling ("group", "batch", "none").
        reward_scale: the rewards' common scale before mixing ("batch_rank", credo's reading; "none": as given).

    Returns:
        Tensor[N] float32: grpo(w(a_i) . scale_rewards(r)_i).
    """
    k = rewards.shape[1]
    weights = emphasis_weights(actions, k, eta) if actions is not None else torch.full((k,), 1.0 / k)
    return grpo(mixed_reward(scale_rewards(rewards, reward_scale), weights), group_ids, scale=scale)
