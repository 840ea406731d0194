"""Per-token clipped policy loss, KL to the reference, and verl's loss aggregation modes. Pure tensor code."""
import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("k1", "k2", "k3")


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, num_tokens=None, num_seqs=None, norm_len=None):
    """Reduce a per-token loss to a scalar with verl's semantics.

    Args:
        loss_mat: Tensor[B, T] per-token loss.
        mask: Tensor[B, T], 1 on tokens that count.
        mode: one of LOSS_AGG_MODES.
            token-mean: sum of all token losses / number of tokens.
            seq-mean-token-sum: mean over sequences of each sequence's token sum.
            seq-mean-token-mean: mean over sequences of each sequence's token mean.
            seq-mean-token-sum-norm (Dr.GRPO): mean over sequences of token sum / norm_len.
        num_tokens, num_seqs: denominators when this batch is a slice of a larger one (micro-batches,
            ranks); by default this batch's own counts, which is verl's single-batch result.
        norm_len: constant length for seq-mean-token-sum-norm; defaults to T, as verl does. The trainer
            passes --max_answer_seq_len so that the divisor stays constant through training.

    Returns:
        scalar Tensor.
    """
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        denom = mask.sum() if num_tokens is None else num_tokens
        return (loss_mat * mask).sum() / max(float(denom), 1.0)
    seq_sum = (loss_mat * mask).sum(-1)
    seq_count = mask.sum(-1)
    if mode == "seq-mean-token-sum":
        seq_loss = seq_sum
    elif mode == "seq-mean-token-mean":
        seq_loss = seq_sum / seq_count.clamp(min=1.0)
    elif mode == "seq-mean-token-sum-norm":
        seq_loss = seq_sum / float(norm_len if norm_len is not None else mask.shape[-1])
    else:
        raise ValueError(f"loss_agg_mode must be one of {LOSS_AGG_MODES}, got {mode!r}")
    denom = loss_mat.shape[0] if num_seqs is None else num_seqs
    return seq_loss.sum() / max(float(denom), 1.0)


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kl_type: str) -> torch.Tensor:
    """Per-token KL estimate of pi || pi_ref from sampled tokens (Schulman's k1, k2, k3).

    Args:
        logp, ref_logp: Tensor[B, T] log-probabilities of the sampled tokens under the policy and reference.
    Returns:
        Tensor[B, T]. k1 = logp - ref; k2 = (logp - ref)^2 / 2; k3 = exp(ref - logp) - (ref - logp) - 1.
    """
    if kl_type == "k1":
        return logp - ref_logp
    if kl_type == "k2":
        return 0.5 * (logp - ref_logp) ** 2
    if kl_type == "k3":
        log_ratio = (ref_logp - logp).clamp(-20.0, 20.0)  # exp overflow guard; never binds for sane policies
        return torch.exp(log_ratio) - log_ratio - 1.0
    raise ValueError(f"kl_type must be one of {KL_TYPES}, got {kl_type!r}")


def truncated_is_weights(old_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (TIS) for the sampler/trainer mismatch, detached.

    The tokens were sampled by vLLM, whose log-probs differ slightly from the trainer's for the same weights
    (kernels, precision). TIS (Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL
    training"; verl's rollout_is and TRL's vllm_importance_sampling_correction) reweights each token's loss by
    w = min(exp(logp_old - logp_sampler), cap), with no gradient through w.

    Args:
        old_logp: Tensor[B, T] trainer log-probs of the sampled tokens under the rollout policy.
        rollout_logp: Tensor[B, T] the sampler's log-probs of the same tokens.
        cap: upper bound C on the weight (verl and our default: 2).
    Returns:
        Tensor[B, T] weights in (0, cap].
    """
    log_ratio = (old_logp.detach() - rollout_logp.detach()).clamp(-20.0, 20.0)
    return torch.exp(log_ratio).clamp(max=cap)


def policy_loss(logp, old_logp, advantages, mask, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0,
                loss_agg_mode="token-mean", ref_logp=None, beta=0.0, kl_type="k3", is_weights=None, **agg_kwargs):
    """PPO clipped surrogate with asymmetric clip (DAPO) and dual clip (Ye et al. 2020) for negative advantages.

    Args:
        logp: Tensor[B, T] current log-probs of the sampled tokens (with grad).
        old_logp: Tensor[B, T] log-probs under the rollout policy.
        advantages: Tensor[B, T] token advantages (a response's advantage repeated over its tokens).
        mask: Tensor[B, T] response mask.
        clip_ratio_c: dual-clip bound (> 1): for A < 0 the loss is capped at -A * c.
        ref_logp, beta, kl_type: KL-to-reference term added to the loss when beta > 0.
        is_weights: Tensor[B, T] detached per-token weights on the clipped surrogate (truncated_is_weights), or None.
        agg_kwargs: num_tokens / num_seqs / norm_len, passed to agg_loss.

    Returns:
        (loss scalar, stats dict of detached scalars: pg_loss, clipfrac, clipfrac_lower, kl, approx_kl).
    """
    mask_f = mask.to(logp.dtype)
    ratio = torch.exp((logp - old_logp).clamp(-20.0, 20.0))
    loss1 = -advantages * ratio
    loss2 = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    clipped = torch.maximum(loss1, loss2)
    loss3 = -advantages * clip_ratio_c
    dual = torch.minimum(loss3, clipped)
    pg_losses = torch.where(advantages < 0, dual, clipped)
    if is_weights is not None:
        pg_losses = pg_losses * is_weights
    pg_loss = agg_loss(pg_losses, mask, loss_agg_mode, **agg_kwargs)

    n_tok = mask_f.sum().clamp(min=1.0)
    stats = {
        "clipfrac": ((loss2 > loss1).to(logp.dtype) * mask_f).sum().detach() / n_tok,
        "clipfrac_lower": ((clipped > loss3) & (advantages < 0)).to(logp.dtype).mul(mask_f).sum().detach() / n_tok,
        "approx_kl": ((old_logp - logp) * mask_f).sum().detach() / n_tok,
        "pg_loss": pg_loss.detach(),
    }
    loss = pg_loss
    if ref_logp is not None and beta > 0:
        kl = kl_penalty(logp, ref_logp, kl_type)
        kl_loss = agg_loss(kl, mask, loss_agg_mode, **agg_kwargs)
        loss = loss + beta * kl_loss
        stats["kl"] = (kl.detach() * mask_f).sum() / n_tok
    return loss, stats
