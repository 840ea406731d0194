"""Before any model is built: claim the output folder, then decide whether this run starts fresh, resumes a
checkpoint of the same experiment, or finds its run already finished; record the resolved config.

Rank 0 decides (it holds the lock and reads the files) and every rank gets the same decision.
"""
import logging
import os
from dataclasses import dataclass

from rl.engine import dist
from rl.run.checkpoint import ResumePoint, checkpoint_root, resolve_resume
from rl.errors import TrainingAborted
from rl.log.loggers import WandbSettings, report_backends
from rl.run.saved_config import (RunMismatch, acquire_output_lock, default_output_dir, flag_differences, method_flags,
                           plain_flags, read_run_config, resolved_config, write_run_config)
from rl.run.shared_output import check_output_dir_shared

logger = logging.getLogger(__name__)


@dataclass
class RunStart:
    output_dir: str
    resume: ResumePoint = None  # None: start from the model's initial weights
    finished: bool = False      # the checkpoint to resume already reached the steps asked for
    flags: dict = None          # method-defining flags, recorded in every checkpoint's manifest


class _OtherRankFailed(SystemExit):
    """Rank 0 refused to start and printed why; the other ranks exit quietly."""


@dataclass(frozen=True)
class OutputSettings:
    """Where a run writes and how often it saves; read once start_run has resolved --output_dir."""
    output_dir: str
    save_steps: int              # a full checkpoint every N steps (0 = only at the end and on a signal)
    save_total_limit: int        # complete checkpoints kept (0 = all)
    save_model_only_steps: int   # an HF export under hf/step_N every N steps (0 = off)
    final_export: bool           # not --no_final_export: the HF model in final/
    tensorboard_path: str        # --tensorboard_path with TensorBoard among the loggers, else None
    report_to: tuple = ("jsonl",)  # the loggers (rl/log/loggers.py: --report_to, plus tensorboard for --enable_tensorboard)
    wandb: WandbSettings = None  # the wandb logger's project, run name and config

    @classmethod
    def from_args(cls, args) -> "OutputSettings":
        if args.output_dir is None:
            raise ValueError("OutputSettings.from_args before start_run resolved --output_dir")
        report_to = report_backends(args.report_to, args.enable_tensorboard)
        return cls(output_dir=args.output_dir, save_steps=args.save_steps, save_total_limit=args.save_total_limit,
                   save_model_only_steps=args.save_model_only_steps, final_export=not args.no_final_export,
                   tensorboard_path=args.tensorboard_path if "tensorboard" in report_to else None,
                   report_to=report_to, wandb=WandbSettings.from_args(args) if "wandb" in report_to else None)


def start_run(args, steps: int, defaults: dict) -> RunStart:
    """Collective. Sets args.output_dir (and the TensorBoard default) when they were left to their defaults.

    steps: the steps this invocation trains to (--max_steps, or --test_stop_step under --enable_test_mode)."""
    if args.output_dir is None:  # one timestamp for all ranks: each rank parses its own flags
        args.output_dir = dist.all_gather_object(default_output_dir(args.algo, args.env))[0]
        if dist.rank() == 0:
            print(f"output dir: {args.output_dir} (a new one per run; pass it as --output_dir to resume)", flush=True)
    if args.tensorboard_path is None:
        args.tensorboard_path = os.path.join(args.output_dir, "tensorboard")
    outcome = None
    if dist.rank() == 0:
        try:
            outcome = _decide(args, steps, defaults, dist.world_size())
        except TrainingAborted as exc:
            outcome = exc
        except OSError as exc:  # e.g. a full disk when writing config.json: the other ranks must not wait forever
            outcome = TrainingAborted(f"--output_dir {args.output_dir}: {exc}")
    outcome = dist.all_gather_object(outcome)[0]
    if isinstance(outcome, BaseException):
        if dist.rank() == 0:
            raise outcome
        raise _OtherRankFailed(1)
    check_output_dir_shared(args.output_dir)  # a node-local folder: refused now, not at the first save
    return outcome


def _decide(args, steps: int, defaults: dict, world_size: int) -> RunStart:
    acquire_output_lock(args.output_dir)
    point = resolve_resume(args.resume, args.output_dir)
    current = plain_flags(args)
    saved_config = read_run_config(args.output_dir)
    saved, where = None, None
    if point is not None and point.flags:
        saved, where = point.flags, point.path
    elif saved_config is not None and args.resume in ("auto", "force"):
        saved, where = saved_config["flags"], os.path.join(args.output_dir, "config.json")
    differences = flag_differences(saved, current, defaults) if saved is not None else []
    if differences and args.resume == "auto":
        raise RunMismatch(
            f"--resume auto: {where} belongs to another experiment; its method-defining flags differ: "
            f"{'; '.join(differences)}. Give this run its own --output_dir (by default every run gets a new "
            f"output/<algo>_<env>_<time>), or pass --resume force to continue the old run with the new flags")
    if differences:
        # DeepSpeed restores the optimizer's param groups as saved, so their lr and weight decay win over the flags.
        logger.warning("--resume %s: continuing %s with other method-defining flags: %s (the optimizer state is "
                       "restored as saved: its learning rate and weight decay stay the checkpoint's)", args.resume,
                       where, "; ".join(differences))
    finished = point is not None and point.step >= steps
    if not finished:
        if point is not None:
            point.verify()  # every file against the manifest, before a model is even loaded
        elif os.path.isdir(checkpoint_root(args.output_dir)) and args.resume == "none":
            logger.warning("--resume none: starting afresh in %s; its checkpoints will be replaced", args.output_dir)
        write_run_config(args.output_dir, resolved_config(args, world_size))
    return RunStart(output_dir=args.output_dir, resume=point, finished=finished, flags=method_flags(current))


def parser_defaults() -> dict:
    from rl.config import build_parser
    return vars(build_parser().parse_args([]))
