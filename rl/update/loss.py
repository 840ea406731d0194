"""The per-token policy losses (--loss_mode: PPO-clip, GSPO, CISPO, SAPO), KL to the reference, and verl's loss
aggregation modes (seq-mean-token-sum-norm divided as TRL's Dr.GRPO: agg_loss). Pure tensor code."""
from dataclasses import dataclass

import torch

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("k1", "k2", "k3")


def agg_loss(loss_mat: torch.Tensor, mask: torch.Tensor, mode: str, num_tokens=None, num_seqs=None, norm_len=None):
    """Reduce a per-token loss to a scalar: verl's mode names and, for the first three, verl's semantics.

    Args:
        loss_mat: Tensor[B, T] per-token loss.
        mask: Tensor[B, T], 1 on tokens that count.
        mode: one of LOSS_AGG_MODES.
            token-mean: sum of all token losses / number of tokens.
            seq-mean-token-sum: mean over sequences of each sequence's token sum.
            seq-mean-token-mean: mean over sequences of each sequence's token mean.
            seq-mean-token-sum-norm (Dr.GRPO): sum of all token losses / (num_seqs x norm_len), which is how
                TRL divides (grpo_trainer.py, loss_type "dr_grpo": sum / (B x max_completion_length), TRL at
                f2cd577), not how verl does: verl's agg_loss (core_algos.py at b178a3c) divides the summed
                sequence losses by loss_scale_factor (default T) alone, with no mean over the sequences, so its
                loss is num_seqs times credo's (with Adam mostly a rescaling, but not under gradient clipping).
        num_tokens, num_seqs: denominators when this batch is a slice of a larger one (micro-batches,
            ranks); by default this batch's own counts, which is verl's single-batch result (TRL's for
            seq-mean-token-sum-norm).
        norm_len: constant length for seq-mean-token-sum-norm (TRL's max_completion_length, verl's
            loss_scale_factor); defaults to T, as verl's does. The trainer passes --max_answer_seq_len so that the
            divisor stays constant through training.

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


# --- the policy losses (--loss_mode, verl's actor.policy_loss.loss_mode) ---
# Each maps the token log-probs to a per-token loss Tensor[B, T] (before aggregation) and two Tensor[B, T] bool
# masks for the clip statistics. `logp` carries the gradient; `old_logp` is the rollout policy's (or `logp` detached
# on a single on-policy pass). Every one of them multiplies the advantage, so a token with advantage 0 gives exactly
# 0 loss and 0 gradient (what --skip_zero_advantage_rows relies on), and at ratio 1 every one has the same gradient
# with respect to logp, -A per token (before aggregation): they differ only off-policy.


@dataclass(frozen=True)
class LossBounds:
    """The bounds the policy losses read (the flags of the same names)."""
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0   # vanilla's dual clip only
    tau_pos: float = 1.0        # sapo only
    tau_neg: float = 1.05


def _ratio(logp, old_logp):
    return torch.exp((logp - old_logp).clamp(-20.0, 20.0))  # exp overflow guard; never binds for sane policies


def vanilla_losses(logp, old_logp, advantages, mask, b: LossBounds):
    """PPO's clipped surrogate (Schulman et al. 2017, eq. 7) with asymmetric clip (DAPO's clip-higher) and the dual
    clip (Ye et al. 2020) for negative advantages: per token, with r = exp(logp - old_logp),
        L = max(-A r, -A clip(r, 1 - low, 1 + high)), then for A < 0: min(L, -A c).
    verl's loss_mode "vanilla"; TRL's loss_type grpo / bnpo / dr_grpo / dapo (which differ only in aggregation,
    --loss_agg_mode here; TRL has no dual clip)."""
    ratio = _ratio(logp, old_logp)
    loss1 = -advantages * ratio
    loss2 = -advantages * ratio.clamp(1.0 - b.clip_ratio_low, 1.0 + b.clip_ratio_high)
    clipped = torch.maximum(loss1, loss2)
    loss3 = -advantages * b.clip_ratio_c
    losses = torch.where(advantages < 0, torch.minimum(loss3, clipped), clipped)
    return losses, loss2 > loss1, (clipped > loss3) & (advantages < 0)


def gspo_losses(logp, old_logp, advantages, mask, b: LossBounds):
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071): the clipped objective on
    the length-normalised sequence ratio (equation numbers are not cited: the paper's text was not read here; the
    formulas below are the ones verl's compute_policy_loss_gspo and TRL's docs state),
        s_i = (pi(y_i|x) / pi_old(y_i|x))^(1/|y_i|) = exp((1/|y_i|) sum_t log(pi(y_i,t) / pi_old(y_i,t))),
        J = (1/G) sum_i min(s_i A_i, clip(s_i, 1 - low, 1 + high) A_i),
    written in the token-level form of GSPO-token,
        s_i,t = sg[s_i] * pi(y_i,t) / sg[pi(y_i,t)],
    whose value is s_i at every token and whose gradient is s_i * grad log pi(y_i,t): with one advantage per response
    its gradient equals GSPO's (with seq-mean-token-mean aggregation, (1/G) sum_i (1/|y_i|) sum_t), and it also
    takes turn-level advantages (one A per token). The clip decision is one per response; verl's GSPO recipe clips
    at 3e-4 / 4e-4 (--clip_ratio_low / --clip_ratio_high). No dual clip (verl has none). |y_i| counts the tokens of `mask` (the model's tokens). verl's loss_mode "gspo" (the same
    token-level form); TRL's importance_sampling_level="sequence"."""
    tokens = mask.to(logp.dtype)
    log_s = ((logp - old_logp) * tokens).sum(-1) / tokens.sum(-1).clamp(min=1.0)  # s_i, in log space
    log_s_it = logp - logp.detach() + log_s.detach().clamp(-20.0, 20.0)[:, None]  # GSPO-token: sg[s_i] pi / sg[pi]
    s_it = torch.exp(log_s_it)
    loss1 = -advantages * s_it
    loss2 = -advantages * s_it.clamp(1.0 - b.clip_ratio_low, 1.0 + b.clip_ratio_high)
    return torch.maximum(loss1, loss2), loss2 > loss1, torch.zeros_like(mask, dtype=torch.bool)


def cispo_losses(logp, old_logp, advantages, mask, b: LossBounds):
    """CISPO (MiniMax 2025, "MiniMax-M1", arXiv 2506.13585, section 3.1): REINFORCE with a clipped, stop-gradient
    importance-sampling weight on the token log-prob (as verl's compute_policy_loss_cispo; the paper's equation
    numbers are not cited: its text was not read here),
        J = (1 / sum_i |o_i|) sum_i sum_t sg(r^_i,t) A_i,t log pi(o_i,t),  r^ = clip(r, 1 - eps_low, 1 + eps_high),
    so no token's gradient is dropped, only its weight bounded: d loss / d logp = -sg(r^) A. The paper sets no lower
    bound (eps_low large: --clip_ratio_low 1 or more) and tunes eps_high; its 1 / sum |o_i| is token-mean.
    verl's loss_mode "cispo" (clip(r, 1 - low, 1 + high), as here); TRL's loss_type "cispo" clips at min(r,
    epsilon_high) with no lower bound: TRL's epsilon_high 5.0 is --clip_ratio_high 4.0 --clip_ratio_low 1.0 here.
    The loss value (-w A logp) is not on the scale of the clipped surrogate's: compare gradients, not pg_loss."""
    ratio = _ratio(logp, old_logp)
    weight = ratio.clamp(1.0 - b.clip_ratio_low, 1.0 + b.clip_ratio_high)
    losses = -weight.detach() * advantages * logp
    return losses, ratio > 1.0 + b.clip_ratio_high, ratio < 1.0 - b.clip_ratio_low  # where a bound of the weight binds


def sapo_losses(logp, old_logp, advantages, mask, b: LossBounds):
    """SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv 2511.20347): a smooth,
    temperature-controlled gate in place of the clip (the paper's equation was not read here: this is the formula
    verl, TRL, AReaL and ms-swift implement identically, each citing the paper),
        f_i,t(r) = sigma(tau_i,t (r - 1)) * 4 / tau_i,t,   tau_i,t = tau_pos if A_i,t > 0 else tau_neg,
        J = (1/G) sum_i (1/|y_i|) sum_t f_i,t(r_i,t) A_i,t,
    so d loss / d logp = -A r 4 sigma (1 - sigma): exactly -A at r = 1, decaying smoothly as r leaves 1 (faster for
    negative advantages, tau_neg > tau_pos; 1.0 and 1.05 as verl and TRL default them). No clip, no dual clip. verl's loss_mode "sapo"
    (tau_pos / tau_neg, the formula verl, TRL, AReaL and ms-swift implement identically); TRL's loss_type "sapo"
    (sapo_temperature_pos / _neg)."""
    ratio = _ratio(logp, old_logp)
    tau = torch.where(advantages > 0, torch.tensor(b.tau_pos, dtype=logp.dtype, device=logp.device),
                      torch.tensor(b.tau_neg, dtype=logp.dtype, device=logp.device))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau
    none = torch.zeros_like(mask, dtype=torch.bool)
    return -gate * advantages, none, none


POLICY_LOSSES = {"vanilla": vanilla_losses, "gspo": gspo_losses, "cispo": cispo_losses, "sapo": sapo_losses}
LOSS_MODES = tuple(POLICY_LOSSES)
# --loss_agg_mode when not given: the aggregation each loss's objective is written with. GSPO's and SAPO's
# objectives average each response's tokens, then the responses (verl forces seq-mean-token-mean for both); CISPO's
# divides by all tokens; vanilla keeps credo's token-mean (DAPO's token-level loss, verl's default).
DEFAULT_LOSS_AGG = {"vanilla": "token-mean", "gspo": "seq-mean-token-mean", "cispo": "token-mean",
                    "sapo": "seq-mean-token-mean"}


def policy_loss(logp, old_logp, advantages, mask, clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0,
                loss_agg_mode="token-mean", ref_logp=None, beta=0.0, kl_type="k3", is_weights=None,
                loss_mode="vanilla", tau_pos=1.0, tau_neg=1.05, **agg_kwargs):
    """The --loss_mode policy loss (POLICY_LOSSES), its verl aggregation, and the KL term to the reference.

    Args:
        logp: Tensor[B, T] current log-probs of the sampled tokens (with grad).
        old_logp: Tensor[B, T] log-probs under the rollout policy.
        advantages: Tensor[B, T] token advantages (a response's advantage repeated over its tokens).
        mask: Tensor[B, T] response mask.
        clip_ratio_low, clip_ratio_high: the clip range (vanilla, gspo) or the weight's bounds (cispo).
        clip_ratio_c: dual-clip bound (> 1): for A < 0 vanilla's loss is capped at -A * c.
        ref_logp, beta, kl_type: KL-to-reference term added to the loss when beta > 0.
        is_weights: Tensor[B, T] detached per-token weights on the policy loss (truncated_is_weights), or None.
        loss_mode: a key of POLICY_LOSSES; tau_pos, tau_neg: sapo's gate temperatures.
        agg_kwargs: num_tokens / num_seqs / norm_len, passed to agg_loss.

    Returns:
        (loss scalar, stats dict of detached scalars: pg_loss, clipfrac, clipfrac_lower, kl, approx_kl).
    """
    if loss_mode not in POLICY_LOSSES:
        raise ValueError(f"loss_mode must be one of {LOSS_MODES}, got {loss_mode!r}")
    mask_f = mask.to(logp.dtype)
    bounds = LossBounds(clip_ratio_low, clip_ratio_high, clip_ratio_c, tau_pos, tau_neg)
    pg_losses, clipped, clipped_lower = POLICY_LOSSES[loss_mode](logp, old_logp, advantages, mask, bounds)
    if is_weights is not None:
        pg_losses = pg_losses * is_weights
    pg_loss = agg_loss(pg_losses, mask, loss_agg_mode, **agg_kwargs)

    n_tok = mask_f.sum().clamp(min=1.0)
    stats = {
        "clipfrac": (clipped.to(logp.dtype) * mask_f).sum().detach() / n_tok,
        "clipfrac_lower": (clipped_lower.to(logp.dtype) * mask_f).sum().detach() / n_tok,
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
