"""The rollout correction: the gap between the trainer's log-probs and the sampler's on the tokens the sampler drew,
and the importance-sampling factors that correct the loss for it (--vllm_is_correction).

The sampler's log-probs come from vLLM (batch.rollout_logp) or from credo's own decode loop (batch.signals.logp,
rl/rollout/sampling_signals.py), which computes the same log-probs as the trainer: there the gap is float rounding
only (tests/update/test_rollout_correction.py bounds it), and a larger one means the sampler and the trainer no
longer score the same tokens the same way (a layout, temperature or position bug).

The four modes are TRL's GRPOTrainer `vllm_importance_sampling_mode` (trl/trainer/grpo_trainer.py,
_generate_and_score_completions), with its bounds `vllm_importance_sampling_clip_max` / `_clip_min`:
    token_truncate     w_t = clip(exp(logp_old_t - logp_sampler_t), C_min, C_max)            (TIS, Yao et al. 2025)
    token_mask         w_t = exp(...) where C_min <= exp(...) <= C_max, else 0
    sequence_truncate  w_i = clip(exp(sum_t (logp_old_t - logp_sampler_t)), C_min, C_max) on every token of i
    sequence_mask      w_i = exp(sum_t ...) inside [C_min, C_max], else 0 on every token of i  (TRL's default mode)
Each multiplies the per-token policy loss, never the KL term, and the loss keeps its denominators (a masked token
still counts in them), as TRL does. verl's rollout correction (verl/trainer/ppo/rollout_corr_helper.py;
docs/algo/rollout_corr.md) names the same two levels `rollout_is: token | sequence` with `rollout_is_threshold` (its
truncation cap, 2.0), and rejects ("rollout_rs") by removing the tokens from the response mask, denominators
included: credo follows TRL there.
"""
import torch

from rl.engine import dist
from rl.rollout.sampling_signals import checked_signals

IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
ALIASES = {"tis": "token_truncate"}  # credo's earlier name for token-level truncation, kept for existing scripts
CORRECTIONS = ("none", "tis", *IS_MODES)
LOG_RATIO_BOUND = 20.0  # verl's safety bound: weights in [exp(-20), exp(20)] before truncation or masking


def rollout_is_weights(old_logp, sampler_logp, mask, mode: str, cap_max=None, cap_min=None):
    """Detached importance weights pi_old / pi_sampler for the loss, at token or sequence level, truncated or masked.

    Args:
        old_logp: Tensor[B, T] trainer log-probs of the sampled tokens under the rollout policy.
        sampler_logp: Tensor[B, T] the sampler's log-probs of the same tokens.
        mask: Tensor[B, T], 1 on the model's tokens (a sequence ratio sums the log-ratio over them only).
        mode: one of IS_MODES (or "tis"); cap_max, cap_min: the bounds C_max, C_min (None: unbounded on that side).
    Returns:
        (weights Tensor[B, T] float32, 0 off the mask; truncated Tensor[B, T] bool; masked Tensor[B, T] bool), the
        last two on the mask's tokens only (for a sequence mode every token of an affected sequence).
    """
    mode = ALIASES.get(mode, mode)
    if mode not in IS_MODES:
        raise ValueError(f"vllm_is_correction mode must be one of {IS_MODES}, got {mode!r}")
    on = mask.bool()
    log_ratio = (old_logp.detach().float() - sampler_logp.detach().float()) * on
    if mode.startswith("sequence"):
        log_ratio = log_ratio.sum(-1, keepdim=True).expand_as(log_ratio)  # the product of the token ratios
    ratio = torch.exp(log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))
    high = cap_max if cap_max is not None else float("inf")
    low = cap_min if cap_min is not None else float("-inf")
    outside = ((ratio > high) | (ratio < low)) & on
    none = torch.zeros_like(on)
    if mode.endswith("truncate"):
        return ratio.clamp(min=cap_min, max=cap_max) * on, outside, none
    return ratio.masked_fill(outside, 0.0) * on, none, outside


def sampler_logprobs(batch):
    """Tensor[N, R] the sampler's own log-probs of the drawn tokens: vLLM's (batch.rollout_logp), else what credo's
    decode loop recorded (batch.signals.logp), else None (HF generate, the hybrid engine: nothing to compare)."""
    if batch.rollout_logp is not None:
        return batch.rollout_logp
    signals = checked_signals(batch)
    return None if signals is None else signals.logp


class SamplerMismatch:
    """One step's tally of |logp_trainer - logp_sampler| on the sampled tokens, and the correction's weights.

    `weights` is called once per micro-batch; `metrics` (a collective: every rank calls it) gives, over all ranks'
    response tokens, rollout/logp_diff_mean and rollout/logp_diff_max (the gap), rollout/is_truncated_frac and
    rollout/is_masked_frac (the share of tokens whose weight the mode truncated or set to 0; 0 without a
    correction), or {} when no sampler gave log-probs.
    """

    def __init__(self, correction: str, cap: float = None, cap_min: float = None):
        self.correction, self.cap, self.cap_min = correction, cap, cap_min
        self.seen = False
        self.max_gap = 0.0
        self.sums = torch.zeros(4, dtype=torch.float64)  # sum of gaps, truncated tokens, masked tokens, tokens

    def weights(self, old_logp, sampler_logp, mask):
        """Tensor[B, T] loss factors under a correction, else None (the gap is measured either way)."""
        if sampler_logp is None:
            return None
        self.seen = True
        mask = mask.to(torch.float32)
        gap = (old_logp.detach().float() - sampler_logp.float()).abs() * mask
        self.max_gap = max(self.max_gap, gap.max().item() if gap.numel() else 0.0)
        if self.correction == "none":
            self.sums += torch.tensor([gap.sum().item(), 0.0, 0.0, mask.sum().item()], dtype=torch.float64)
            return None
        w, truncated, masked = rollout_is_weights(old_logp, sampler_logp, mask, self.correction, self.cap,
                                                  self.cap_min)
        self.sums += torch.tensor([gap.sum().item(), truncated.sum().item(), masked.sum().item(),
                                   mask.sum().item()], dtype=torch.float64)
        return w

    def metrics(self) -> dict:
        if not self.seen:
            return {}
        sums = dist.all_reduce(self.sums)
        tokens = max(sums[3].item(), 1.0)
        return {"rollout/logp_diff_max": dist.all_reduce(torch.tensor([self.max_gap]), op="max").item(),
                "rollout/logp_diff_mean": sums[0].item() / tokens,
                "rollout/is_truncated_frac": sums[1].item() / tokens,
                "rollout/is_masked_frac": sums[2].item() / tokens}


def add_rollout_correction_flags(p):
    """The rollout correction's flags."""
    g = p.add_argument_group("update: rollout correction (vLLM or credo's decode loop)")
    g.add_argument("--vllm_is_correction", choices=CORRECTIONS, default="none",
                   help="importance sampling for the mismatch between the sampler's and the trainer's log-probs "
                        "(TRL's vllm_importance_sampling_mode; docs/loss.md); the sampler is vLLM or credo's decode "
                        "loop (in bf16 its KV-cache decode rounds differently from the training forward), not "
                        "--decode_loop hf_generate or the hybrid engine (they record no log-probs): token_truncate "
                        "(TIS: each token's loss x min(exp(logp_trainer - logp_sampler), --vllm_is_cap); `tis` is "
                        "its old name), token_mask "
                        "(a token whose ratio leaves [--vllm_is_cap_min, --vllm_is_cap] weighs 0), "
                        "sequence_truncate / sequence_mask (the same on the response's product of token ratios, "
                        "one weight per response; TRL's default is sequence_mask). Masked tokens keep their place in "
                        "the loss's denominators, as in TRL. The gap itself (rollout/logp_diff_*) is logged whatever "
                        "this says, for vLLM and for credo's own decode loop")
    g.add_argument("--vllm_is_cap", type=float, default=2.0,
                   help="upper bound C_max of the weight (TRL's vllm_importance_sampling_clip_max, default 3.0 there; "
                        "2 here, verl's rollout_is_threshold)")
    g.add_argument("--vllm_is_cap_min", type=float, default=None,
                   help="lower bound C_min of the weight (TRL's vllm_importance_sampling_clip_min); default none")


def validate_rollout_correction(args, bad) -> None:
    """The bounds (the backend check, that a correction needs a sampler that records log-probs, lives with the
    backend: rl/rollout/vllm/flags.validate_rollout_backend)."""
    if args.vllm_is_cap <= 0:
        bad(f"--vllm_is_cap must be > 0, got {args.vllm_is_cap}")
    if args.vllm_is_cap_min is not None and not 0 <= args.vllm_is_cap_min < args.vllm_is_cap:
        bad(f"--vllm_is_cap_min {args.vllm_is_cap_min} must be >= 0 and below --vllm_is_cap {args.vllm_is_cap}")
