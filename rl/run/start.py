"""Before any model is built: claim the output folder, then decide whether this run starts fresh, resumes a
checkpoint of the same experiment, or finds its run already finished; record the resolved config.

Rank 0 decides (it holds the lock and reads the files) and every rank gets the same decision.
"""
import contextlib
import logging
import os
import shutil
import socket
import sys
import uuid
from dataclasses import dataclass, replace

from rl.engine import dist
from rl.run.checkpoint import ResumePoint, checkpoint_root, resolve_resume
from rl.run.heartbeat import start_heartbeat
from rl.run.reshard import prompts_per_step, saved_world_size
from rl.errors import TrainingAborted
from rl.log.loggers import WandbSettings, close_training_log, report_backends, start_training_log
from rl.run.saved_config import (CONFIG_NAME, DEFAULT_SAVE_STEPS, LOCK_NAME, RunMismatch, SAVE_COST, acquire_output_lock,
                                default_output_dir, flag_differences, machine_differences, method_flags, plain_flags,
                                read_run_config, release_output_lock, resolved_config, write_run_config)

logger = logging.getLogger(__name__)
SAVE_STRATEGIES = ("steps", "final", "no")  # --save_strategy (TRL's names)


@dataclass
class RunStart:
    output_dir: str
    resume: ResumePoint = None  # None: start from the model's initial weights
    finished: bool = False      # the checkpoint to resume already reached the steps asked for
    flags: dict = None          # method-defining flags, recorded in every checkpoint's manifest
    tensorboard_path: str = None  # --tensorboard_path as resolved (OUTPUT_DIR/tensorboard by default)


class _OtherRankFailed(SystemExit):
    """Rank 0 refused to start and printed why; the other ranks exit quietly."""


@dataclass(frozen=True)
class OutputSettings:
    """Where a run writes and how often it saves; read once start_run has resolved --output_dir."""
    output_dir: str
    checkpoints: bool            # --save_strategy steps: full checkpoints (periodic, at the end, on a signal or abort)
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
        return cls(output_dir=args.output_dir, checkpoints=args.save_strategy == "steps", save_steps=args.save_steps,
                   save_total_limit=args.save_total_limit, save_model_only_steps=args.save_model_only_steps,
                   final_export=args.save_strategy != "no" and not args.no_final_export,
                   tensorboard_path=args.tensorboard_path if "tensorboard" in report_to else None,
                   report_to=report_to, wandb=WandbSettings.from_args(args, plain_flags(args)) if "wandb" in report_to else None)


@dataclass(frozen=True)
class StartSettings:
    """What start_run reads of the flags: where the run writes, how it resumes, and the record of every flag."""
    flags: dict                 # every parsed flag as JSON values (plain_flags): config.json's record, compared on resume
    output_dir: str             # --output_dir; None: a new output/<algo>_<env>_<UTC time>
    tensorboard_path: str       # --tensorboard_path; None: OUTPUT_DIR/tensorboard
    algo: str
    env: str
    resume: str                 # --resume: auto, force, none, or a checkpoint folder
    heartbeat_timeout_s: float  # --heartbeat_timeout_s (0 = off)
    dtype: str                  # --dtype, for the machine record

    @classmethod
    def from_args(cls, args) -> "StartSettings":
        return cls(flags=plain_flags(args), output_dir=args.output_dir, tensorboard_path=args.tensorboard_path,
                   algo=args.algo, env=args.env, resume=args.resume, heartbeat_timeout_s=args.heartbeat_timeout_s,
                   dtype=args.dtype)


def start_run(settings: StartSettings, steps: int, defaults: dict) -> RunStart:
    """Collective. Resolves --output_dir and --tensorboard_path when they were left to their defaults (the returned
    RunStart carries both; the trainer writes them back into its flags).

    steps: the steps this invocation trains to (--max_steps, or --test_stop_step under --enable_test_mode)."""
    output_dir = settings.output_dir
    if output_dir is None:  # one timestamp for all ranks: each rank parses its own flags
        output_dir = dist.all_gather_object(default_output_dir(settings.algo, settings.env))[0]
        if dist.rank() == 0:
            print(f"output dir: {output_dir} (a new one per run; pass it as --output_dir to resume)", flush=True)
    tensorboard_path = settings.tensorboard_path or os.path.join(output_dir, "tensorboard")
    settings = replace(settings, output_dir=output_dir, tensorboard_path=tensorboard_path,
                       flags={**settings.flags, "output_dir": output_dir, "tensorboard_path": tensorboard_path})
    outcome = None
    if dist.rank() == 0:
        try:
            outcome = _decide(settings, steps, defaults, dist.world_size())
        except TrainingAborted as exc:
            outcome = exc
        except OSError as exc:  # e.g. a full disk when writing config.json: the other ranks must not wait forever
            outcome = TrainingAborted(f"--output_dir {output_dir}: {exc}")
        if isinstance(outcome, RunStart) and _scope:  # train.py's rank 0: its console also goes to training.log
            start_training_log(output_dir)
    outcome = dist.all_gather_object(outcome)[0]
    if isinstance(outcome, BaseException):
        if dist.rank() == 0:
            raise outcome
        raise _OtherRankFailed(1)
    check_output_dir_shared(output_dir)  # a node-local folder: refused now, not at the first save
    if not outcome.finished:  # from here a lost rank ends the run within --heartbeat_timeout_s (rl/run/heartbeat.py)
        start_heartbeat(output_dir, settings.heartbeat_timeout_s)
    return outcome


def _decide(settings: StartSettings, steps: int, defaults: dict, world_size: int) -> RunStart:
    output_dir, resume = settings.output_dir, settings.resume
    created = not os.path.exists(output_dir)
    acquire_output_lock(output_dir)
    point = resolve_resume(resume, output_dir)
    current = settings.flags
    saved_config = read_run_config(output_dir)
    saved, where = None, None
    if point is not None and point.flags:
        saved, where = point.flags, point.path
    elif saved_config is not None and resume in ("auto", "force"):
        trained = trained_step_evidence(output_dir)
        if trained is None:  # a run that stopped before its first step: no experiment to protect
            print(f"reusing {output_dir}: the run recorded in its config.json (written "
                  f"{saved_config.get('written_utc', 'at an unknown time')}) stopped before its first step, so this "
                  f"run starts afresh there with its own flags", flush=True)
        else:
            saved, where = saved_config["flags"], os.path.join(output_dir, "config.json") + f" ({trained})"
    # A run saved at another rank count: its prompts per rank are compared as prompts per step (rl/run/reshard.py)
    saved_world = saved_world_size(point.path, point.manifest) if point else (saved_config or {}).get("world_size")
    differences = []
    if saved is not None:
        saved, prompts = prompts_per_step(saved, saved_world, current, world_size)
        differences = flag_differences(saved, current, defaults) + ([prompts] if prompts else [])
    if differences and resume == "auto":
        raise RunMismatch(
            f"--resume auto: {where} belongs to another experiment; its method-defining flags differ: "
            f"{'; '.join(differences)}. Give this run its own --output_dir (by default every run gets a new "
            f"output/<algo>_<env>_<time>), or pass --resume force to continue the old run with the new flags")
    if differences:
        # DeepSpeed restores the optimizer's param groups as saved, so their lr and weight decay win over the flags.
        logger.warning("--resume %s: continuing %s with other method-defining flags: %s (the optimizer state is "
                       "restored as saved: its learning rate and weight decay stay the checkpoint's)", resume,
                       where, "; ".join(differences))
    finished = point is not None and point.step >= steps
    if not finished:
        if point is not None:
            point.verify()  # every file against the manifest, before a model is even loaded
        elif os.path.isdir(checkpoint_root(output_dir)) and resume == "none":
            logger.warning("--resume none: starting afresh in %s; its checkpoints will be replaced", output_dir)
        config = resolved_config(current, settings.dtype, world_size)
        moved = machine_differences((saved_config or {}).get("machine"), config["machine"]) if point else []
        if moved:
            logger.warning("resuming %s on another machine than its last run (%s): the steps from here are trained "
                           "as they should be, but not bit for bit as that machine would have trained them "
                           "(docs/reproducibility.md)", point.path, "; ".join(moved))
        write_run_config(output_dir, config)
        _claimed.update(output_dir=output_dir, created=created)
    return RunStart(output_dir=output_dir, resume=point, finished=finished, flags=method_flags(current),
                    tensorboard_path=settings.tensorboard_path)


# --- a failed start leaves nothing behind ---
# A run that stops before its first step (a bad model path, a reward that fails on the first batch, an out-of-memory
# load) has trained nothing: its folder must not make the fixed command look like "another experiment" (_decide
# reuses such a folder), and a new folder per run (the default) must not pile up empty ones.

_claimed = {}  # in the process that decided (rank 0): {"output_dir", "created": whether this start made the folder}
_scope = []  # non-empty inside discard_failed_start: a train.py run, whose rank 0 keeps OUTPUT_DIR/training.log


def trained_step_evidence(output_dir: str):
    """What in output_dir shows that a step was trained there (a checkpoint folder, a metrics row, an export), as
    words; None when nothing does."""
    checkpoints = checkpoint_root(output_dir)
    if os.path.isdir(checkpoints) and os.listdir(checkpoints):
        return "it holds checkpoints"
    metrics = os.path.join(output_dir, "metrics.jsonl")
    if os.path.exists(metrics) and os.path.getsize(metrics) > 0:
        return "metrics.jsonl has trained steps"
    for name in ("final", "hf", "best"):
        if os.path.exists(os.path.join(output_dir, name)):
            return f"it holds {name}/"
    return None


@contextlib.contextmanager
def discard_failed_start():
    """Around train.py's run: when it raises before any step was trained, undo its claim on the output folder. A
    folder this start created is removed whole (nothing in it came from elsewhere); in an existing folder only its
    config.json and lock go (its training.log keeps why it stopped), so the same or a corrected command starts afresh
    there. Inside it, start_run tees rank 0's console into OUTPUT_DIR/training.log (train.py closes it at the end)."""
    _scope.append(True)
    try:
        yield
    except BaseException:
        output_dir, created = _claimed.pop("output_dir", None), _claimed.pop("created", False)
        if output_dir is not None and trained_step_evidence(output_dir) is None:
            close_training_log()
            release_output_lock(output_dir)
            if created:
                shutil.rmtree(output_dir, ignore_errors=True)
                what = f"removed {output_dir}"
            else:
                for name in (CONFIG_NAME, LOCK_NAME):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(output_dir, name))
                what = f"removed its {CONFIG_NAME} from {output_dir}"
            print(f"the run stopped before its first step: {what} (nothing was trained; the command, or a "
                  "corrected one, starts afresh)", file=sys.stderr, flush=True)
        raise
    finally:
        _scope.pop()


# --- shared output ---
# Every rank must see the one --output_dir: checked at start, before any model is loaded.
#
# Each rank writes its own checkpoint shards and RNG state into OUTPUT_DIR/checkpoints/.tmp-step_N, which rank 0
# creates, and rank 0 lists every rank's files into the manifest; a resume is decided by rank 0 and loaded by every
# rank from the same path. On a folder that is local to each node (a node's own disk instead of NFS or Lustre), the
# first save would fail on the other nodes' ranks ("No such file or directory") after hours of training, and a resume
# would find nothing there. This check makes that a clear error at step 0. (DeepSpeed's `use_node_local_storage`
# mode, one copy per node, is not what credo's atomic save-and-manifest protocol does: credo's reading is one shared
# folder, as DeepSpeed-Chat's multi-node scripts assume.)

def check_output_dir_shared(output_dir: str):
    """Collective. Raises TrainingAborted on every rank when some rank does not see a file rank 0 wrote in
    output_dir (which rank 0 has created); naming those ranks and their hosts."""
    if dist.world_size() == 1:
        return
    token = dist.all_gather_object(uuid.uuid4().hex)[0]  # rank 0's: one name for the whole world
    probe = os.path.join(output_dir, f".shared-check-{token}")
    error = None
    if dist.rank() == 0:
        try:
            with open(probe, "w") as f:
                f.write(token)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            error = f"--output_dir {output_dir}: rank 0 cannot write there: {exc}"
    error = dist.all_gather_object(error)[0]
    if error is None:
        try:
            with open(probe) as f:
                seen = f.read() == token
        except OSError:
            seen = False
        views = dist.all_gather_object((seen, socket.gethostname()))
        dist.barrier()  # everyone has looked before the probe goes
        if dist.rank() == 0:
            try:
                os.unlink(probe)
            except OSError:
                pass
        blind = [f"rank {r} on {host}" for r, (ok, host) in enumerate(views) if not ok]
        if blind:
            error = (f"--output_dir {output_dir} is not shared by every rank: {', '.join(blind)} cannot see the "
                     f"file rank 0 (on {views[0][1]}) wrote there. Every rank writes its checkpoint shards into this "
                     f"folder and rank 0 gathers them into one manifest, so a multi-node run needs --output_dir on a "
                     f"filesystem that every node mounts at the same path (NFS, Lustre, ...)")
    if error is not None:
        raise TrainingAborted(error)


def add_run_flags(p):
    """A run's output folder, what it saves, and how it resumes."""
    g = p.add_argument_group("run: output, checkpoints, resume")
    g.add_argument("--output_dir", default=None,
                   help="checkpoints, metrics.jsonl, config.json, final HF export; default: a new folder per run, "
                        "output/<algo>_<env>_<UTC time> (pass an existing run's folder to resume it)")
    g.add_argument("--save_strategy", choices=SAVE_STRATEGIES, default="steps",
                   help="what a run writes to disk: steps = a full checkpoint every --save_steps and at the end, "
                        "plus the HF export in OUTPUT_DIR/final (about 2.1 GB for SmolLM2-135M); final = only the HF "
                        "export (0.5 GB; no optimizer state, so nothing to resume); no = nothing but metrics and "
                        "logs (TRL's save_strategy names). Default steps")
    g.add_argument("--save_steps", type=int, default=DEFAULT_SAVE_STEPS,
                   help=f"full checkpoint (weights, fp32 Adam state, RNG, data position) every N steps and at the end "
                        f"(0 = only at the end). {SAVE_COST} At the CPU default's ~20 s per step, saving every "
                        f"{DEFAULT_SAVE_STEPS} steps costs ~5%% of the run and a crash loses at most ~7 minutes; "
                        f"raise it where steps are fast and saves slow")
    g.add_argument("--save_model_only_steps", type=int, default=0,
                   help="also export the model alone (HF format, no optimizer state: 0.54 GB and ~3 s for "
                        "SmolLM2-135M, a third of a full save) to "
                        "OUTPUT_DIR/hf/step_N every N steps, for evaluation between full checkpoints; all are kept "
                        "(0 = off)")
    g.add_argument("--no_final_export", action="store_true", help="skip the HF export to OUTPUT_DIR/final")
    g.add_argument("--save_total_limit", type=int, default=2,
                   help="keep the newest N complete checkpoints (0 = all); a save completes before an old one is "
                        "deleted, so the disk holds up to N + 1 while saving")
    g.add_argument("--heartbeat_timeout_s", type=float, default=60.0,
                   help="with several ranks: a rank whose heartbeat (a counter its background thread bumps in the "
                        "rendezvous store every 2 s) stops for this long is lost, and every other rank stops within "
                        "it, naming that rank, its node and the checkpoint to resume from, instead of waiting out "
                        "--dist_timeout_minutes in a collective (a frozen, unplugged or unreachable node); 0 = off. "
                        "Default 60")
    g.add_argument("--resume", default="auto",
                   help="auto: continue OUTPUT_DIR's latest complete checkpoint when its method-defining flags "
                        "(rl/run/saved_config.py) match, refuse when they differ, exit 0 when it already reached "
                        "--max_steps; force: continue it even with other flags; none: start fresh (replacing its "
                        "checkpoints); or a checkpoints folder / step_N folder")


def validate_run(args, bad):
    if args.save_strategy == "final" and args.no_final_export:
        bad("--save_strategy final keeps only the final HF export, which --no_final_export turns off: use "
            "--save_strategy no to save nothing")
    if args.save_total_limit < 0 or args.save_steps < 0 or args.save_model_only_steps < 0:
        bad("--save_total_limit, --save_steps and --save_model_only_steps must be >= 0")
    if args.heartbeat_timeout_s < 0:
        bad(f"--heartbeat_timeout_s must be >= 0 (0 = off), got {args.heartbeat_timeout_s}")
    if args.resume not in ("auto", "force", "none") and not os.path.exists(args.resume):
        bad(f"--resume {args.resume} does not exist (use auto, force, none, or a checkpoint folder)")
