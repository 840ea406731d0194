"""One step's update, pure of the Trainer: it gets the engine, the rollout batch and the loss settings.

no_grad_logprobs fills the log-probs the loss compares against (the frozen reference's, and the rollout policy's
when the update takes several optimizer steps); ppo_update cuts the rollout batch into --ppo_mini_batch_size
mini-batches (one optimizer step each, verl's PPO loop), runs --ppo_epochs passes over them in length-sorted
micro-batches (loss, backward, DeepSpeed step) and keeps per-token stat sums by name, which UpdateTally.metrics
reduces over ranks in one all_reduce.
"""
import argparse
import os
import time
from dataclasses import dataclass, field

import torch

from rl.engine import dist
from rl.update.batching import batched_response_logprobs, micro_batches, response_logprobs
from rl.update.loss import DEFAULT_LOSS_AGG, KL_TYPES, LOSS_AGG_MODES, LOSS_MODES, policy_loss
from rl.update.ref_sync import add_ref_sync_flags, validate_ref_sync
from rl.update.rollout_correction import SamplerMismatch, sampler_logprobs, validate_rollout_correction
from rl.update.top_entropy import mini_batch_entropy_masks

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
    is_cap_min: float = None  # --vllm_is_cap_min
    top_entropy_quantile: float = 1.0
    skip_zero_rows: bool = False  # --skip_zero_advantage_rows (applied only without a KL term in the loss)
    loss_mode: str = "vanilla"
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    mini_batches: int = 1  # optimizer steps per pass: prompts of a step / --ppo_mini_batch_size (mini_batch_count)

    @classmethod
    def from_args(cls, args) -> "LossSettings":
        return cls(micro=args.per_device_train_micro_batch_size, ppo_epochs=args.ppo_epochs,
                   temperature=args.temperature, clip_ratio_low=args.clip_ratio_low,
                   clip_ratio_high=args.clip_ratio_high, clip_ratio_c=args.clip_ratio_c,
                   loss_agg_mode=args.loss_agg_mode, beta=args.beta, kl_type=args.kl_type,
                   norm_len=args.max_answer_seq_len, is_correction=args.vllm_is_correction, is_cap=args.vllm_is_cap,
                   is_cap_min=args.vllm_is_cap_min, top_entropy_quantile=args.top_entropy_quantile,
                   skip_zero_rows=args.skip_zero_advantage_rows, loss_mode=args.loss_mode, tau_pos=args.tau_pos,
                   tau_neg=args.tau_neg,
                   mini_batches=mini_batch_count(args.per_device_generation_batch_size, dist.world_size(),
                                                 args.num_generations, args.ppo_mini_batch_size))


def mini_batch_count(prompts_per_rank: int, world_size: int, num_generations: int, ppo_mini_batch_size) -> int:
    """Optimizer steps per pass over a rollout batch: its prompts over all ranks / --ppo_mini_batch_size (verl's
    meaning: prompts, counted over all ranks; each rank's mini-batch is then ppo_mini_batch_size x num_generations /
    world_size of its responses). 1 when the flag is not given. Raises ValueError (naming the flag) when the
    mini-batches cannot be cut evenly on every rank.

    The engine (rl/engine/actor.py) must accumulate the micro-batches of one mini-batch, not of the whole rollout:
    gradient_accumulation_steps = prompts_per_rank x num_generations / this / micro, and the LR schedule spans
    max_steps x ppo_epochs x this optimizer steps."""
    if ppo_mini_batch_size is None:
        return 1
    prompts = prompts_per_rank * world_size
    if ppo_mini_batch_size < 1 or prompts % ppo_mini_batch_size:
        raise ValueError(f"--ppo_mini_batch_size {ppo_mini_batch_size} must divide the {prompts} prompts of a step "
                         f"(--per_device_generation_batch_size {prompts_per_rank} x {world_size} rank(s))")
    if ppo_mini_batch_size * num_generations % world_size:
        raise ValueError(f"--ppo_mini_batch_size {ppo_mini_batch_size} x --num_generations {num_generations} "
                         f"responses do not split evenly over {world_size} ranks")
    return prompts // ppo_mini_batch_size


def no_grad_logprobs(actor, reference, batch, settings: LossSettings):
    """Fill batch.ref_logp (KL to the reference) and batch.old_logp (the ratio's denominator) where needed."""
    def forward(engine):
        return batched_response_logprobs(engine, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                         settings.temperature, settings.micro)
    if reference is not None and batch.ref_logp is None:  # MAESTRO's --maestro_kl_in_reward may have them
        batch.ref_logp = forward(reference)
    # With one optimizer step the rollout policy is the current one: no extra forward needed. With several, every
    # step's ratio is against the rollout policy, computed here before the first step (verl's old_log_probs).
    if settings.ppo_epochs > 1 or settings.mini_batches > 1:
        batch.old_logp = forward(actor)


@dataclass
class UpdateTally:
    """This rank's sums over the update's micro-batches; `metrics` is a collective (every rank calls it)."""
    accumulation: int                # micro-batches per optimizer step (DeepSpeed's gradient accumulation)
    optimizer_steps: int             # --ppo_epochs x mini-batches
    mismatch: SamplerMismatch        # sampler vs trainer log-probs (+ the rollout correction)
    entropy_threshold: float = None  # --top_entropy_quantile's threshold, mean over the mini-batches
    sums: dict = field(default_factory=lambda: {k: 0.0 for k in (*TOKEN_STATS, "loss", "pg_loss", "tokens")})
    rows: float = 0.0                # this rank's responses, and those the update left out (zero advantage)
    rows_skipped: float = 0.0
    # this rank's forward shapes and seconds, for perf/mfu/actor (rl/log/step_metrics.update_roofline_metrics)
    seq_tokens: float = 0.0          # tokens through the model's body: rows x columns of every micro-batch forward
    head_tokens: float = 0.0         # positions through the LM head: rows x (response columns + 1)
    seconds: float = 0.0             # the epochs' loop: forwards, backwards and optimizer steps

    def add(self, stats: dict, loss: float, tokens: float):
        for k in TOKEN_STATS:
            if k in stats:
                self.sums[k] += float(stats[k]) * tokens
        # like the loss, each micro-batch's pg_loss is already its share of its mini-batch's: summed, not weighted
        self.sums["loss"] += loss
        self.sums["pg_loss"] += float(stats["pg_loss"])
        self.sums["tokens"] += tokens

    def metrics(self, with_kl: bool) -> dict:
        total = dist.all_reduce_dict({**self.sums, "rows": self.rows, "rows_skipped": self.rows_skipped})
        out = {f"actor/{k}": total[k] / max(total["tokens"], 1.0) for k in TOKEN_STATS if with_kl or k != "kl"}
        # each micro-batch's loss is already its share of its mini-batch's loss: their sum over ranks, divided by
        # the micro-batches of one rank's optimizer step, the ranks and the steps, is the mean loss of one step
        passes = dist.world_size() * self.accumulation * self.optimizer_steps
        out["actor/loss"] = total["loss"] / passes
        out["actor/pg_loss"] = total["pg_loss"] / passes  # the policy-gradient part of actor/loss (no KL term)
        out["train/rows_skipped_frac"] = total["rows_skipped"] / max(total["rows"], 1.0)
        out.update(self.mismatch.metrics())
        if self.entropy_threshold is not None:  # the same on every rank (the quantile is over all ranks' tokens)
            out["actor/entropy_threshold"] = self.entropy_threshold
        return out


def rows_with_signal(batch, settings: LossSettings):
    """Tensor[N] bool of the rows whose loss term has a gradient, or None for all rows. A row whose every token
    advantage is exactly 0 contributes exactly 0 to every --loss_mode's policy loss (each multiplies the advantage)
    and to its gradient; the loss's denominators (each mini-batch's tokens over all ranks, `micro` sequences per
    micro-batch) do not change with the rows trained, so leaving it out changes the step only by float rounding. A
    KL term in the loss would give it a gradient: then every row is trained."""
    if not settings.skip_zero_rows or (settings.beta > 0 and batch.ref_logp is not None):
        return None
    return (batch.token_advantages(slice(None)) != 0).any(dim=1)


def ppo_update(engine, batch, settings: LossSettings, guard) -> UpdateTally:
    """--ppo_epochs passes of the --loss_mode policy loss over `batch` (a rl.types.Rollout with advantages), cut
    into settings.mini_batches mini-batches of consecutive rows (verl's split), one DeepSpeed optimizer step each.
    Every step's ratio is against batch.old_logp, the rollout policy's (no_grad_logprobs), never against the weights
    an earlier step of this update left. `guard` (rl.update.step_guard.StepGuard) sees every loss and every gradient
    before it is applied.

    Denominators are each mini-batch's own, as verl's (its batch_num_tokens is the mini-batch's, over the ranks):
    token-mean divides by the mini-batch's response tokens over all ranks, seq-mean modes by its responses over all
    ranks (`micro` per micro-batch times the accumulation and the ranks), seq-mean-token-sum-norm by their count
    times --max_answer_seq_len.
    With --skip_zero_advantage_rows each mini-batch's micro-batches hold only its rows with a gradient, in as few
    micro-batches as they fill (the most any rank needs, so ZeRO-3's collective forwards match; the engine is told
    which one ends the mini-batch, DeepSpeed's set_gradient_accumulation_boundary), and its denominators are still
    those of all its rows."""
    n, steps = len(batch), settings.mini_batches
    rows_per_step = n // steps
    accumulation = rows_per_step // settings.micro
    engine_accumulation = (engine.gradient_accumulation_steps() if hasattr(engine, "gradient_accumulation_steps")
                           else accumulation)
    if n % steps or rows_per_step % settings.micro or engine_accumulation != accumulation:
        raise ValueError(
            f"the update takes {steps} optimizer step(s) of {n} / {steps} responses in micro-batches of "
            f"{settings.micro} ({accumulation} per step), but the engine accumulates {engine_accumulation}: build it "
            f"with gradient_accumulation_steps = responses per rank / mini-batches / micro (mini_batch_count)")
    mini_rows = torch.arange(n).view(steps, rows_per_step)
    # DeepSpeed divides by the accumulation steps and averages over ranks: undo both so that each step's gradient is
    # that of the loss over its whole mini-batch on every rank (verl's global-batch aggregation). One collective.
    step_tokens = dist.all_reduce(torch.stack([batch.response_mask[rows.to(batch.response_mask.device)].sum()
                                               for rows in mini_rows]).float()).tolist()
    keep = rows_with_signal(batch, settings)
    # The kept rows fill as few micro-batches as they need, as many on every rank (ZeRO-3's forwards gather
    # parameters collectively): half as many forwards of twice the rows where half the rows are left out. The
    # denominators stay those of the configured accumulation (DeepSpeed divides by it). This needs an engine that is
    # told where its accumulation ends (DeepSpeed's set_gradient_accumulation_boundary); any other keeps the count.
    sets_boundary = hasattr(engine, "set_gradient_accumulation_boundary")
    counts = [None] * steps
    if keep is not None and sets_boundary:
        kept = torch.tensor([max(1, -(-int(keep[rows].sum()) // settings.micro)) for rows in mini_rows])
        counts = dist.all_reduce(kept, op="max").tolist()
    plan = [(micro_batches(batch.attention_mask, batch.prompt_len, settings.micro, keep=keep, rows=rows, count=count),
             {"num_tokens": tokens / (dist.world_size() * accumulation), "num_seqs": settings.micro,
              "norm_len": settings.norm_len})
            for rows, tokens, count in zip(mini_rows, step_tokens, counts)]
    tally = UpdateTally(accumulation, settings.ppo_epochs * steps,
                        SamplerMismatch(settings.is_correction, settings.is_cap, settings.is_cap_min))
    tally.rows = float(n)
    tally.rows_skipped = float(n - sum(len(mb.rows) for parts, _ in plan for mb in parts))
    sampler_logp = sampler_logprobs(batch)  # vLLM's or credo's decode loop's, for the gap and the correction
    if settings.is_correction != "none" and sampler_logp is None:  # never a silently uncorrected step
        raise RuntimeError(f"--vllm_is_correction {settings.is_correction}: this rollout carries no sampler "
                           "log-probs (neither vLLM's nor the decode loop's), so the correction cannot be applied")
    high_entropy = None  # --top_entropy_quantile: Tensor[N, R] bool, the tokens that carry the policy gradient
    if settings.top_entropy_quantile < 1.0:
        high_entropy, tally.entropy_threshold = mini_batch_entropy_masks(
            engine, batch, mini_rows, settings.top_entropy_quantile, settings.temperature, settings.micro)
    engine.train()
    started = time.perf_counter()
    for _ in range(settings.ppo_epochs):
        for parts, agg in plan:
            for i, mb in enumerate(parts):
                # the mini-batch's last micro-batch is its optimizer step, however many it has (DeepSpeed's own
                # count would wait for all `accumulation` of them)
                boundary = i == len(parts) - 1
                if sets_boundary:
                    engine.set_gradient_accumulation_boundary(boundary)
                part = mb.of(batch)
                mask = part.response_mask
                logp, entropy = response_logprobs(engine, part.input_ids, part.attention_mask, part.prompt_len,
                                                  settings.temperature, with_entropy=True)
                old = part.old_logp if part.old_logp is not None else logp.detach()
                pg_weights = tally.mismatch.weights(old, mb.response(sampler_logp), mask)
                if high_entropy is not None:  # multiplies the policy loss only; the denominators stay
                    keep = mb.response(high_entropy).to(logp.dtype)
                    pg_weights = keep if pg_weights is None else pg_weights * keep
                loss, stats = policy_loss(logp, old, part.advantages, mask, settings.clip_ratio_low,
                                          settings.clip_ratio_high, settings.clip_ratio_c, settings.loss_agg_mode,
                                          ref_logp=part.ref_logp, beta=settings.beta, kl_type=settings.kl_type,
                                          is_weights=pg_weights, loss_mode=settings.loss_mode,
                                          tau_pos=settings.tau_pos, tau_neg=settings.tau_neg, **agg)
                guard.check_loss(loss)
                engine.backward(loss)
                if boundary:
                    guard.before_optimizer_step(engine.module, engine.optimizer)
                # ZeRO 1-3 skip an optimizer step whose gradient norm is not finite (DeepSpeed's overflow check).
                engine.step()
                tokens = float(mask.sum())
                stats["entropy"] = (entropy * mask).sum() / max(tokens, 1.0)
                tally.add(stats, float(loss.detach()), tokens)
                rows, columns = part.input_ids.shape
                tally.seq_tokens += rows * columns
                tally.head_tokens += rows * (columns - part.prompt_len + 1)
    tally.seconds = time.perf_counter() - started
    return tally


def add_update_flags(p):
    """The update's flags: mini- and micro-batches, epochs, the policy loss and its KL term."""
    g = p.add_argument_group("update: mini-batches, micro-batches and the loss")
    g.add_argument("--ppo_mini_batch_size", type=int, default=None,
                   help="prompts per optimizer step, counted over all ranks, each with its --num_generations "
                        "responses (verl's actor.ppo_mini_batch_size; TRL's steps_per_generation is the number of "
                        "mini-batches): each rollout batch of --per_device_generation_batch_size x ranks prompts is "
                        "cut into (those prompts / this) mini-batches of consecutive responses, one optimizer step "
                        "each, every step's ratio against the rollout policy's log-probs. Must divide the prompts of "
                        "a step. Default: all of them, one optimizer step per epoch")
    g.add_argument("--per_device_train_micro_batch_size", type=int, default=None,
                   help="responses per forward/backward (gradient accumulation over the rest of a mini-batch); rows "
                        "are sorted by length and each micro-batch trimmed to its own padding (rl/update/batching.py). "
                        f"Default: the largest divisor of a mini-batch's responses on a rank up to "
                        f"{DEFAULT_MAX_MICRO_BATCH}")
    g.add_argument("--ppo_epochs", type=int, default=1,
                   help="passes over each rollout batch's mini-batches (one optimizer step per mini-batch and pass)")
    g.add_argument("--skip_zero_advantage_rows", action=argparse.BooleanOptionalAction, default=True,
                   help="the update leaves out responses whose every token advantage is exactly 0 (a GRPO group "
                        "whose responses all scored alike): their policy-gradient term is exactly 0 under every "
                        "--loss_mode, so the step is the same up to float rounding (each mini-batch keeps the "
                        "denominators of all its rows) and its forward/backward cost falls by their share "
                        "(train/rows_skipped_frac): the kept rows fill as few micro-batches as they need, the same "
                        "number on every rank; actor/entropy and clipfrac are then over the trained responses. "
                        "Never with --beta > 0, whose KL term they do carry. credo's reading: verl and TRL train on "
                        "every row")
    g.add_argument("--loss_mode", choices=LOSS_MODES, default=None,
                   help="the policy loss, verl's actor.policy_loss.loss_mode (rl/update/loss.py; docs/loss.md), "
                        "default vanilla (gspo under MAESTRO's --maestro_recipe paper): "
                        "vanilla = PPO clip with dual clip (TRL loss_type grpo/bnpo/dr_grpo/dapo); gspo = GSPO's "
                        "length-normalised sequence ratio, clipped (arXiv 2507.18071; TRL importance_sampling_level="
                        "sequence; GSPO's reported clip range 3e-4/4e-4, as verl's recipe sets it); cispo = MiniMax-M1's clipped, stop-gradient IS "
                        "weight on the token log-prob (arXiv 2506.13585; TRL loss_type cispo); sapo = SAPO's soft "
                        "sigmoid gate, no clip (arXiv 2511.20347; TRL loss_type sapo)")
    g.add_argument("--tau_pos", type=float, default=1.0,
                   help="--loss_mode sapo: gate temperature for positive advantages (verl's tau_pos, TRL's "
                        "sapo_temperature_pos; 1.0 as verl and TRL default it)")
    g.add_argument("--tau_neg", type=float, default=1.05,
                   help="--loss_mode sapo: gate temperature for negative advantages (verl's tau_neg, TRL's "
                        "sapo_temperature_neg; 1.05 as verl and TRL default it: faster decay off-policy)")
    g.add_argument("--beta", type=float, default=0.0, help="KL coefficient to the frozen reference; 0 skips loading it")
    g.add_argument("--kl_type", choices=KL_TYPES, default="k3", help="KL estimator (k3 = verl low_var_kl)")
    g.add_argument("--clip_ratio_low", type=float, default=0.2,
                   help="clip below 1 (epsilon; cispo: the IS weight's lower bound 1 - this, none from 1 up)")
    g.add_argument("--clip_ratio_high", type=float, default=0.2,
                   help="clip above 1 (DAPO clip-higher uses 0.28; cispo: the IS weight's upper bound 1 + this)")
    g.add_argument("--clip_ratio_c", type=float, default=3.0,
                   help="dual-clip bound for negative advantages (> 1; --loss_mode vanilla only)")
    g.add_argument("--loss_agg_mode", choices=LOSS_AGG_MODES, default=None,
                   help="verl loss aggregation (default: token-mean; seq-mean-token-mean under --loss_mode gspo or "
                        "sapo, as verl forces for both)")
    g.add_argument("--top_entropy_quantile", type=float, default=None,
                   help="default 1 (0.2 under MAESTRO's --maestro_recipe paper): "
                        "only the highest-entropy q of each optimizer step's response tokens (all ranks) carry the "
                        "policy gradient; the KL term and the denominators keep every token (TRL's "
                        "top_entropy_quantile, the rho of arXiv 2506.01939, whose recommended value is 0.2; "
                        "rl/update/top_entropy.py). 1 keeps every token, 0 only the highest")
    add_ref_sync_flags(p)


def update_sampling_signals(settings: LossSettings) -> frozenset:
    """What credo's decode loop records for the update (rl/rollout/sampling_signals.py): every drawn token's log-prob
    (the sampler-trainer gap, rollout/logp_diff_*, is logged on every step: float rounding only on this sampler),
    and its entropy under --top_entropy_quantile (no forward of its own then)."""
    return frozenset({"logp"} | ({"entropy"} if settings.top_entropy_quantile < 1.0 else set()))


def world_size_at_launch(environ=None) -> int:
    """The launcher's WORLD_SIZE (1 under plain python): flags are checked before the process group exists."""
    return int((environ if environ is not None else os.environ).get("WORLD_SIZE", "1"))


def validate_update(args, bad):
    """--ppo_epochs, the mini-batches (against the launcher's world size), the micro-batch (resolved here to its
    default: the largest divisor of a mini-batch's responses on a rank up to DEFAULT_MAX_MICRO_BATCH), the loss
    aggregation (resolved to the --loss_mode's, DEFAULT_LOSS_AGG), the dual clip, SAPO's temperatures and the KL
    coefficient."""
    if args.ppo_epochs < 1:
        bad(f"--ppo_epochs must be >= 1, got {args.ppo_epochs}")
    n = args.per_device_generation_batch_size * args.num_generations
    try:
        steps = mini_batch_count(args.per_device_generation_batch_size, world_size_at_launch(), args.num_generations,
                                 args.ppo_mini_batch_size)
    except ValueError as e:
        bad(str(e))
        steps = 1
    rows = n // steps
    largest_divisor = max(d for d in range(1, DEFAULT_MAX_MICRO_BATCH + 1) if rows % d == 0)
    micro = args.per_device_train_micro_batch_size or largest_divisor
    if micro < 1 or rows % micro:
        where = (f"the {n} responses per rank (per_device_generation_batch_size x num_generations)" if steps == 1 else
                 f"the {rows} responses per rank of each of the {steps} mini-batches (--ppo_mini_batch_size)")
        bad(f"--per_device_train_micro_batch_size {micro} must divide {where}")
    args.per_device_train_micro_batch_size = micro
    # unset: the default, unless a recipe (MAESTRO's --maestro_recipe paper) set it before
    args.loss_mode = args.loss_mode or "vanilla"
    args.top_entropy_quantile = 1.0 if args.top_entropy_quantile is None else args.top_entropy_quantile
    if args.loss_agg_mode is None:
        args.loss_agg_mode = DEFAULT_LOSS_AGG[args.loss_mode]
    if args.clip_ratio_c <= 1:
        bad(f"--clip_ratio_c must be > 1 (dual clip), got {args.clip_ratio_c}")
    for flag in ("tau_pos", "tau_neg"):
        if getattr(args, flag) <= 0:
            bad(f"--{flag} must be > 0 (SAPO's gate temperature), got {getattr(args, flag)}")
    if args.beta < 0:
        bad(f"--beta must be >= 0, got {args.beta}")
    if not 0 <= args.top_entropy_quantile <= 1:
        bad(f"--top_entropy_quantile must be in [0, 1], got {args.top_entropy_quantile}")
    validate_rollout_correction(args, bad)
    validate_ref_sync(args, bad)
