"""Non-finite steps: found, kept out of the weights, counted, and the run stopped after too many in a row.

ZeRO 1-3 skip an optimizer step whose gradient norm is not finite (DeepSpeed's overflow check). Without ZeRO
(stage 0) DeepSpeed applies any gradient, so the guard zeroes a non-finite one and steps with lr 0 (a no-op).
A step is bad when any rank saw a non-finite loss, a stage-0 skip or a non-finite gradient norm; all ranks agree.

`counters` (bad_steps_total, bad_steps_in_row) is checkpointed under "counters" in the trainer state, so a resumed
run keeps counting where it stopped.
"""
import logging
import math

import torch

from rl.engine import dist
from rl.errors import TrainingAborted

logger = logging.getLogger(__name__)


class StepGuard:
    def __init__(self, max_bad_steps: int, zero_stage: int, checkpoint_dir: str):
        self.max_bad_steps, self.zero_stage, self.checkpoint_dir = max_bad_steps, zero_stage, checkpoint_dir
        self.counters = {"bad_steps_total": 0, "bad_steps_in_row": 0}
        self.start_step()

    def start_step(self):
        """Forget the previous step's findings (called before each update)."""
        self.nonfinite_loss = False
        self.stage0_skipped = False
        self.stage0_grad_norm = None  # measured by the stage-0 guard: DeepSpeed reports none without ZeRO in fp32

    def check_loss(self, loss: torch.Tensor):
        self.nonfinite_loss |= not bool(torch.isfinite(loss.detach()))

    def before_optimizer_step(self, module: torch.nn.Module, optimizer):
        """At a gradient-accumulation boundary, before the engine's step: under stage 0, make a non-finite gradient
        (on any rank) a no-op step. A collective under stage 0 (every rank calls it)."""
        if self.zero_stage != 0:
            return
        # the global gradient norm (gradients are already averaged over ranks here), before clipping
        norms = [p.grad.detach().float().norm() for p in module.parameters() if p.grad is not None]
        self.stage0_grad_norm = float(torch.stack(norms).norm()) if norms else 0.0
        finite = math.isfinite(self.stage0_grad_norm)
        if dist.all_reduce(torch.tensor([0.0 if finite else 1.0]), op="max").item() == 0:
            return
        for p in module.parameters():
            if p.grad is not None:
                p.grad.zero_()
        for group in optimizer.param_groups:
            group["lr"] = 0.0  # the scheduler sets it again on its next step
        self.stage0_skipped = True

    def grad_norm(self, engine_grad_norm) -> float:
        """The step's gradient norm: the engine's, else the stage-0 guard's measurement, else NaN (unknown)."""
        norm = engine_grad_norm if engine_grad_norm is not None else self.stage0_grad_norm
        return float(norm) if norm is not None else float("nan")

    def end_step(self, step: int, grad_norm: float) -> dict:
        """Decide (over all ranks) whether step `step` (1-based) was bad, count it, and raise TrainingAborted after
        --max_bad_steps bad steps in a row. Returns the train/skipped_* metrics. A collective."""
        bad = self.nonfinite_loss or self.stage0_skipped or not math.isfinite(grad_norm)
        bad = dist.all_reduce(torch.tensor([float(bad)]), op="max").item() > 0
        self._count(bad, step)
        return {"train/skipped_step": float(bad), "train/skipped_steps_total": float(self.counters["bad_steps_total"])}

    def _count(self, bad: bool, step: int):
        if not bad:
            self.counters["bad_steps_in_row"] = 0
            return
        self.counters["bad_steps_total"] += 1
        self.counters["bad_steps_in_row"] += 1
        logger.warning("step %d: non-finite loss or gradients; the update was skipped (%d in a row)",
                       step, self.counters["bad_steps_in_row"])
        if self.counters["bad_steps_in_row"] >= self.max_bad_steps:
            raise TrainingAborted(
                f"{self.counters['bad_steps_in_row']} consecutive steps had non-finite loss or gradients "
                f"(--max_bad_steps {self.max_bad_steps}); stopping. The last good checkpoint in "
                f"{self.checkpoint_dir} is untouched.")


def add_step_guard_flags(p):
    """The non-finite step guard's flag."""
    g = p.add_argument_group("update: non-finite steps")
    g.add_argument("--max_bad_steps", type=int, default=3,
                   help="stop after this many consecutive steps with non-finite loss or gradients (each is skipped)")


def validate_step_guard(args, bad):
    if args.max_bad_steps < 1:
        bad(f"--max_bad_steps must be >= 1, got {args.max_bad_steps}")
