"""One step's PPO update, pure of the Trainer: it gets the engine, the rollout batch and the loss settings.

no_grad_logprobs fills the log-probs the loss compares against (the frozen reference's, and the rollout policy's
when the update makes several passes); ppo_update runs --ppo_epochs passes over length-sorted micro-batches (loss,
backward, DeepSpeed step) and keeps per-token stat sums by name, which UpdateTally.metrics reduces over ranks in
one all_reduce.
"""
import argparse
from dataclasses import dataclass, field

import torch

from rl.engine import dist
from rl.update.batching import batched_response_logprobs, micro_batches
from rl.update.loss import policy_loss
from rl.update.logprobs import response_logprobs
from rl.update.loss import KL_TYPES, LOSS_AGG_MODES
from rl.update.rollout_correction import SamplerMismatch

# Default micro-batch cap: length-sorted micro-batches of 8 rows carry less padding than one 32-row block and bound
# the activation memory of long multi-turn rows. The GPU launchers (scripts/gpu/common.sh) set their own.
DEFAULT_MAX_MICRO_BATCH = 8

# Per-token statistics, reported as token-weighted means over every rank's response tokens (actor/<name>).
TOKEN_STATS = ("clipfrac", "clipfrac_lower", "approx_kl", "kl", "entropy")


@dataclass(frozen=True)
class LossSettings:
    """The flags the update reads (names as on the command line, where they differ in the comment)."""
    micro: int             # --per_device_train_micro_batch_size
    ppo_epochs: int
    temperature: float     # the rollout's: log-probs are those of the distribution that sampled
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float
    loss_agg_mode: str
    beta: float
    kl_type: str
    norm_len: int          # --max_answer_seq_len: Dr.GRPO's constant divisor (seq-mean-token-sum-norm)
    is_correction: str     # --vllm_is_correction
    is_cap: float          # --vllm_is_cap
    skip_zero_rows: bool = False  # --skip_zero_advantage_rows (applied only without a KL term in the loss)

    @classmethod
    def from_args(cls, args) -> "LossSettings":
        return cls(micro=args.per_device_train_micro_batch_size, ppo_epochs=args.ppo_epochs,
                   temperature=args.temperature, clip_ratio_low=args.clip_ratio_low,
                   clip_ratio_high=args.clip_ratio_high, clip_ratio_c=args.clip_ratio_c,
                   loss_agg_mode=args.loss_agg_mode, beta=args.beta, kl_type=args.kl_type,
                   norm_len=args.max_answer_seq_len, is_correction=args.vllm_is_correction, is_cap=args.vllm_is_cap,
                   skip_zero_rows=args.skip_zero_advantage_rows)


def no_grad_logprobs(actor, reference, batch, settings: LossSettings):
    """Fill batch.ref_logp (KL to the reference) and batch.old_logp (the PPO ratio's denominator) where needed."""
    def forward(engine):
        return batched_response_logprobs(engine, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                         settings.temperature, settings.micro)
    if reference is not None and batch.ref_logp is None:  # MAESTRO's --maestro_kl_in_reward may have them
        batch.ref_logp = forward(reference)
    if settings.ppo_epochs > 1:  # with one pass the rollout policy is the current one: no extra forward needed
        batch.old_logp = forward(actor)


@dataclass
class UpdateTally:
    """This rank's sums over the update's micro-batches; `metrics` is a collective (every rank calls it)."""
    accumulation: int                # micro-batches per optimizer step (DeepSpeed's gradient accumulation)
    ppo_epochs: int
    mismatch: SamplerMismatch        # vLLM vs trainer log-probs (+ TIS)
    sums: dict = field(default_factory=lambda: {k: 0.0 for k in (*TOKEN_STATS, "loss", "pg_loss", "tokens")})
    rows: float = 0.0                # this rank's responses, and those the update left out (zero advantage)
    rows_skipped: float = 0.0

    def add(self, stats: dict, loss: float, tokens: float):
        for k in TOKEN_STATS:
            if k in stats:
                self.sums[k] += float(stats[k]) * tokens
        # like the loss, each micro-batch's pg_loss is already its share of the global batch's: summed, not weighted
        self.sums["loss"] += loss
        self.sums["pg_loss"] += float(stats["pg_loss"])
        self.sums["tokens"] += tokens

    def metrics(self, with_kl: bool) -> dict:
        total = dist.all_reduce_dict({**self.sums, "rows": self.rows, "rows_skipped": self.rows_skipped})
        out = {f"actor/{k}": total[k] / max(total["tokens"], 1.0) for k in TOKEN_STATS if with_kl or k != "kl"}
        # each micro-batch's loss is already its share of the global batch's: their sum over ranks, divided by
        # the micro-batches of one rank's pass and the ranks, is the mean loss of one pass
        passes = dist.world_size() * self.accumulation * self.ppo_epochs
        out["actor/loss"] = total["loss"] / passes
        out["actor/pg_loss"] = total["pg_loss"] / passes  # the policy-gradient part of actor/loss (no KL term)
        out["train/rows_skipped_frac"] = total["rows_skipped"] / max(total["rows"], 1.0)
        out.update(self.mismatch.metrics())
        return out


def rows_with_signal(batch, settings: LossSettings):
    """Tensor[N] bool of the rows whose loss term has a gradient, or None for all rows. A row whose every token
    advantage is exactly 0 contributes exactly 0 to the clipped policy loss (both clip branches multiply the
    advantage) and to its gradient; the loss's denominators (global tokens, `micro` sequences) do not change with
    the rows trained, so leaving it out changes the step only by float rounding. A KL term in the loss would give
    it a gradient: then every row is trained."""
    if not settings.skip_zero_rows or (settings.beta > 0 and batch.ref_logp is not None):
        return None
    return (batch.token_advantages(slice(None)) != 0).any(dim=1)


def ppo_update(engine, batch, settings: LossSettings, guard) -> UpdateTally:
    """--ppo_epochs passes of the clipped policy loss over `batch` (a rl.types.Rollout with advantages), one
    DeepSpeed step per pass. `guard` (rl.update.step_guard.StepGuard) sees every loss and every gradient before it is
    applied. With --skip_zero_advantage_rows the micro-batches hold only the rows with a gradient (same count of
    micro-batches, so DeepSpeed's accumulation boundary and ZeRO-3's collectives are as without it)."""
    accumulation = len(batch) // settings.micro
    # DeepSpeed divides by the accumulation steps and averages over ranks: undo both so that the step's gradient
    # is that of the loss over the whole global batch (verl's global-batch aggregation).
    global_tokens = float(dist.all_reduce(batch.response_mask.sum()).item())
    agg = {"num_tokens": global_tokens / (dist.world_size() * accumulation), "num_seqs": settings.micro,
           "norm_len": settings.norm_len}
    tally = UpdateTally(accumulation, settings.ppo_epochs, SamplerMismatch(settings.is_correction, settings.is_cap))
    keep = rows_with_signal(batch, settings)
    parts = micro_batches(batch.attention_mask, batch.prompt_len, settings.micro, keep=keep)
    tally.rows = float(len(batch))
    tally.rows_skipped = float(len(batch) - sum(len(mb.rows) for mb in parts))
    engine.train()
    for _ in range(settings.ppo_epochs):
        for part in (mb.of(batch) for mb in parts):
            mask = part.response_mask
            logp, entropy = response_logprobs(engine, part.input_ids, part.attention_mask, part.prompt_len,
                                              settings.temperature, with_entropy=True)
            old = part.old_logp if part.old_logp is not None else logp.detach()
            is_w = tally.mismatch.weights(old, part.rollout_logp, mask)
            loss, stats = policy_loss(logp, old, part.advantages, mask, settings.clip_ratio_low,
                                      settings.clip_ratio_high, settings.clip_ratio_c, settings.loss_agg_mode,
                                      ref_logp=part.ref_logp, beta=settings.beta, kl_type=settings.kl_type,
                                      is_weights=is_w, **agg)
            guard.check_loss(loss)
            engine.backward(loss)
            if engine.is_gradient_accumulation_boundary():
                guard.before_optimizer_step(engine.module, engine.optimizer)
            # ZeRO 1-3 skip an optimizer step whose gradient norm is not finite (DeepSpeed's overflow check).
            engine.step()
            tokens = float(mask.sum())
            stats["entropy"] = (entropy * mask).sum() / max(tokens, 1.0)
            tally.add(stats, float(loss.detach()), tokens)
    return tally


def add_update_flags(p):
    """The update's flags: micro-batches, epochs, the clipped loss and its KL term."""
    g = p.add_argument_group("update: micro-batches and the loss")
    g.add_argument("--per_device_train_micro_batch_size", type=int, default=None,
                   help="responses per forward/backward (gradient accumulation over the rest); rows are sorted by "
                        "length and each micro-batch trimmed to its own padding (rl/update/batching.py). Default: the largest "
                        f"divisor of the rank's responses up to {DEFAULT_MAX_MICRO_BATCH}")
    g.add_argument("--ppo_epochs", type=int, default=1, help="optimizer passes over each rollout batch")
    g.add_argument("--skip_zero_advantage_rows", action=argparse.BooleanOptionalAction, default=True,
                   help="the update leaves out responses whose every token advantage is exactly 0 (a GRPO group "
                        "whose responses all scored alike): their policy-gradient term is exactly 0, so the step is "
                        "the same up to float rounding and its forward/backward cost falls by their share "
                        "(train/rows_skipped_frac); actor/entropy and clipfrac are then over the trained responses. "
                        "Never with --beta > 0, whose KL term they do carry. credo's reading: verl and TRL train on "
                        "every row")
    g.add_argument("--beta", type=float, default=0.0, help="KL coefficient to the frozen reference; 0 skips loading it")
    g.add_argument("--kl_type", choices=KL_TYPES, default="k3", help="KL estimator (k3 = verl low_var_kl)")
    g.add_argument("--clip_ratio_low", type=float, default=0.2, help="PPO clip below 1 (epsilon)")
    g.add_argument("--clip_ratio_high", type=float, default=0.2, help="PPO clip above 1 (DAPO clip-higher uses 0.28)")
    g.add_argument("--clip_ratio_c", type=float, default=3.0, help="dual-clip bound for negative advantages (> 1)")
    g.add_argument("--loss_agg_mode", choices=LOSS_AGG_MODES, default="token-mean", help="verl loss aggregation")


def validate_update(args, bad):
    """--ppo_epochs, the micro-batch (resolved here to its default: the largest divisor of the rank's responses up
    to DEFAULT_MAX_MICRO_BATCH), the dual clip and the KL coefficient."""
    if args.ppo_epochs < 1:
        bad(f"--ppo_epochs must be >= 1, got {args.ppo_epochs}")
    n = args.per_device_generation_batch_size * args.num_generations
    largest_divisor = max(d for d in range(1, DEFAULT_MAX_MICRO_BATCH + 1) if n % d == 0)
    micro = args.per_device_train_micro_batch_size or largest_divisor
    if micro < 1 or n % micro:
        bad(f"--per_device_train_micro_batch_size {micro} must divide the {n} responses per rank "
            f"(per_device_generation_batch_size x num_generations)")
    args.per_device_train_micro_batch_size = micro
    if args.clip_ratio_c <= 1:
        bad(f"--clip_ratio_c must be > 1 (dual clip), got {args.clip_ratio_c}")
    if args.beta < 0:
        bad(f"--beta must be >= 0, got {args.beta}")
