"""DAPO's overlong punishment on the scalar reward after scoring (rewards/overlong.py), and the truncated-completion
mask on the loss before the update. Both are off by default (flags below); the trainer builds LengthSettings only
when one is on, so a default step never enters this file."""
from dataclasses import dataclass

from rewards.overlong import overlong_penalty


@dataclass(frozen=True)
class LengthSettings:
    """What the shaping reads (names as on the command line)."""
    max_answer_seq_len: int
    overlong_buffer_len: int        # 0 = no overlong punishment
    overlong_penalty_factor: float
    mask_truncated_completions: bool

    @classmethod
    def from_args(cls, args) -> "LengthSettings":
        return cls(max_answer_seq_len=args.max_answer_seq_len, overlong_buffer_len=args.overlong_buffer_len,
                   overlong_penalty_factor=args.overlong_penalty_factor,
                   mask_truncated_completions=args.mask_truncated_completions)

    @property
    def active(self) -> bool:
        return self.overlong_buffer_len > 0 or self.mask_truncated_completions


def punish_overlong(batch, s: LengthSettings):
    """Add the overlong penalty to batch.scores in place (a scored Rollout of single-turn responses). Done before
    dynamic sampling judges the groups, as in verl, where the DAPO reward manager's reward already holds it."""
    if s.overlong_buffer_len:
        lengths = batch.response_mask.sum(-1).cpu()
        batch.scores = batch.scores + overlong_penalty(lengths, s.max_answer_seq_len, s.overlong_buffer_len,
                                                       s.overlong_penalty_factor)
    return batch


def overlong_metrics(inputs, s: LengthSettings) -> dict:
    """reward/overlong/mean (the mean penalty, 0 = none) and reward/overlong/frac over the batch-global view;
    {} without --overlong_buffer_len."""
    if not s.overlong_buffer_len:
        return {}
    penalty = overlong_penalty(inputs.lengths, s.max_answer_seq_len, s.overlong_buffer_len, s.overlong_penalty_factor)
    return {"reward/overlong/mean": penalty.mean().item(), "reward/overlong/frac": (penalty < 0).float().mean().item()}


def mask_truncated(batch, s: LengthSettings, eos_ids):
    """Zero the response mask of truncated rows (--mask_truncated_completions), after the advantages and the
    metrics saw them: their tokens then weigh nothing in the loss, its KL term and its token count, as TRL's
    completion_mask does. The rows stay in the batch, so every rank keeps its micro-batch count (ZeRO-3)."""
    if s.mask_truncated_completions:
        keep = ~batch.truncated(eos_ids)
        batch.response_mask = batch.response_mask * keep.to(batch.response_mask.device, batch.response_mask.dtype)[:, None]
    return batch


# --- the flags (DAPO 3.4 and TRL's mask_truncated_completions; rl/config.py composes every room's) ---
def add_length_shaping_flags(p):
    g = p.add_argument_group("update: DAPO's overlong punishment and truncated completions")
    g.add_argument("--overlong_buffer_len", type=int, default=0,
                   help="soft overlong punishment (DAPO 3.4, eq. 13; verl's overlong_buffer.len): a response longer "
                        "than --max_answer_seq_len minus this many tokens gets a reward falling linearly to "
                        "-(--overlong_penalty_factor) at --max_answer_seq_len, added to its scalar reward; 0 = off")
    g.add_argument("--overlong_penalty_factor", type=float, default=1.0,
                   help="scale of the overlong punishment (verl's overlong_buffer.penalty_factor; DAPO's 1.0)")
    g.add_argument("--mask_truncated_completions", action="store_true",
                   help="responses with no EOS within --max_answer_seq_len (any turn, on multi-turn envs) get zero "
                        "loss weight: their tokens leave the loss and its token count; they still count in their "
                        "group's reward statistics (TRL's mask_truncated_completions)")


def validate_length_shaping(args, method, bad):
    """The overlong punishment against the episode length and the method (its rl/methods/ class `method`)."""
    if args.overlong_buffer_len < 0:
        bad(f"--overlong_buffer_len must be >= 0 (0 = off), got {args.overlong_buffer_len}")
    if args.overlong_penalty_factor < 0:
        bad(f"--overlong_penalty_factor must be >= 0, got {args.overlong_penalty_factor}")
    if args.overlong_buffer_len == 0:
        if args.overlong_penalty_factor != 1.0:
            bad("--overlong_penalty_factor is set but the overlong punishment is off: add --overlong_buffer_len")
        return
    if args.overlong_buffer_len > args.max_answer_seq_len:
        bad(f"--overlong_buffer_len {args.overlong_buffer_len} is longer than --max_answer_seq_len "
            f"{args.max_answer_seq_len}: every response would be punished; pick at most {args.max_answer_seq_len}")
    if args.max_turns > 1:
        bad("--overlong_buffer_len punishes a single response's length (DAPO's setting); with --max_turns > 1 each "
            "turn has its own --max_answer_seq_len budget: use --mask_truncated_completions instead")
    if method.min_rewards > 1:
        bad(f"--overlong_buffer_len with --algo {args.algo}: the penalty is added to the scalar reward, which "
            f"{args.algo} does not read (it normalises each reward component on its own); use a length reward in "
            "--reward_funcs instead")
