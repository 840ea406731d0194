"""--top_entropy_quantile: only the highest-entropy tokens carry the policy gradient (Wang et al. 2025, "Beyond the
80/20 Rule: High-Entropy Minority Tokens Drive Effective Reinforcement Learning for LLM Reasoning", arXiv 2506.01939;
TRL's GRPOConfig.top_entropy_quantile, its rho, which the paper sets to 0.2).

As TRL's GRPOTrainer.get_high_entropy_mask: the threshold is the (1 - q) quantile (torch.quantile's linear
interpolation) of the entropies of the batch's response tokens, gathered over all ranks, and a token carries the
policy loss when its entropy is >= the threshold; q = 1 keeps every token, q = 0 only the highest. The mask
multiplies the per-token policy loss only: the KL term and the loss's denominators are unchanged (TRL's
per_token_loss * entropy_mask before the aggregation over the completion mask).

credo's reading where TRL and credo cut batches differently: TRL thresholds each forward's micro-batch (gathered over
processes) with the current policy's entropies; here the batch is each optimizer step's mini-batch
(--ppo_mini_batch_size, all ranks), and the entropies are the rollout policy's, from the sampling pass when credo's
decode loop recorded them, else from one no-grad forward before the update. With one optimizer step per rollout and
one micro-batch (TRL's defaults) the two are the same; credo's length-sorted micro-batches would otherwise make the
threshold depend on response length.
"""
import torch

from rl.engine import dist
from rl.rollout.sampling_signals import checked_signals
from rl.update.batching import micro_batches, response_logprobs

PAD = -1.0  # a sentinel below any entropy (entropies are >= 0), as TRL pads across processes


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """torch.quantile(values, q) (linear interpolation, TRL's call), also past the 2^24 elements torch.quantile
    refuses (there by sorting: the same value up to float rounding). values: Tensor[n], n >= 1. A 0-d tensor."""
    if values.numel() <= 2 ** 24:
        return torch.quantile(values.float(), q)
    return sorted_quantile(values, q)


def sorted_quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """torch.quantile's linear interpolation by sorting. values: Tensor[n], n >= 1."""
    ordered = values.float().sort().values
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def entropy_threshold(entropy: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """The (1 - q) quantile of the entropies of every rank's response tokens (a collective: every rank calls it).

    Args:
        entropy: Tensor[B, T] per-token entropy; mask: Tensor[B, T], 1 on the response tokens that count.
        q: the share of tokens kept, in [0, 1].
    Returns:
        0-d tensor; +inf when no rank has a token (then nothing carries a gradient, as TRL's empty case).
    """
    local = entropy[mask.bool()].float()
    width = int(dist.all_reduce(torch.tensor([float(len(local))]), op="max").item())
    if width == 0:
        return torch.tensor(float("inf"))
    padded = torch.full((width,), PAD)
    padded[:len(local)] = local.cpu()
    gathered = dist.all_gather_cat(padded)
    return quantile(gathered[gathered != PAD], 1.0 - q)


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, q: float) -> tuple:
    """(Tensor[B, T] bool: the tokens that carry the policy gradient, threshold as a float). A collective."""
    threshold = entropy_threshold(entropy, mask, q)
    return (entropy.float() >= threshold.to(entropy.device)) & mask.bool(), float(threshold)


@torch.no_grad()
def rollout_entropy(engine, batch, temperature: float, micro: int) -> torch.Tensor:
    """Tensor[N, R] the rollout policy's entropy at each response position: recorded by the decode loop
    (batch.signals.entropy) or one no-grad forward of `engine` (the same forwards on every rank, as ZeRO-3 needs)."""
    signals = checked_signals(batch)
    if signals is not None and signals.entropy is not None:
        return signals.entropy
    out = torch.zeros(batch.response_mask.shape, device=batch.response_mask.device)
    for mb in micro_batches(batch.attention_mask, batch.prompt_len, micro):
        _, entropy = response_logprobs(engine, *mb.sequences(batch.input_ids, batch.attention_mask), mb.prompt_len,
                                       temperature, with_entropy=True)
        out[mb.rows, :mb.resp_len] = entropy.to(out.dtype)
    return out


def mini_batch_entropy_masks(engine, batch, mini_rows, q: float, temperature: float, micro: int) -> tuple:
    """The --top_entropy_quantile mask of the whole batch, thresholded per mini-batch (each row of `mini_rows`, all
    ranks): (Tensor[N, R] bool, mean threshold over the mini-batches). Rows the update skips still count in the
    quantile (they are tokens of the batch), so --skip_zero_advantage_rows does not change which tokens train."""
    entropy = rollout_entropy(engine, batch, temperature, micro)
    keep = torch.zeros(batch.response_mask.shape, dtype=torch.bool, device=batch.response_mask.device)
    thresholds = []
    for rows in mini_rows:
        rows = rows.to(keep.device)
        keep[rows], threshold = high_entropy_mask(entropy[rows], batch.response_mask[rows], q)
        thresholds.append(threshold)
    return keep, sum(thresholds) / len(thresholds)
