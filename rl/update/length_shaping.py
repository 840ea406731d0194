"""The step's use of rewards/overlong.py: DAPO's overlong punishment on the scalar reward after scoring, and the
truncated-completion mask on the loss before the update (both off by default; flags in rl/rollout/dapo_flags.py)."""
from dataclasses import dataclass

import torch

from rewards.overlong import overlong_penalty, truncated_rows
from rl.engine import dist


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


def shaping_metrics(batch, inputs, s: LengthSettings, eos_ids) -> dict:
    """reward/overlong/mean (the mean penalty, 0 = none) and response_length/truncated_frac, over every rank."""
    if not s.active:
        return {}
    truncated = truncated_rows(batch.turn_ids, batch.response_ids, eos_ids)
    counts = dist.all_reduce(torch.tensor([float(truncated.sum()), float(len(truncated))], dtype=torch.float64))
    out = {"response_length/truncated_frac": (counts[0] / counts[1].clamp(min=1)).item()}
    if s.overlong_buffer_len:
        penalty = overlong_penalty(inputs.lengths, s.max_answer_seq_len, s.overlong_buffer_len,
                                   s.overlong_penalty_factor)
        out["reward/overlong/mean"] = penalty.mean().item()
        out["reward/overlong/frac"] = (penalty < 0).float().mean().item()
    return out


def mask_truncated(batch, s: LengthSettings, eos_ids):
    """Zero the response mask of truncated rows (--mask_truncated_completions), after the advantages and the
    metrics saw them: their tokens then weigh nothing in the loss, its KL term and its token count, as TRL's
    completion_mask does. The rows stay in the batch, so every rank keeps its micro-batch count (ZeRO-3)."""
    if s.mask_truncated_completions:
        keep = ~truncated_rows(batch.turn_ids, batch.response_ids, eos_ids)
        batch.response_mask = batch.response_mask * keep.to(batch.response_mask.device, batch.response_mask.dtype)[:, None]
    return batch
