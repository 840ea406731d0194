"""Where step metrics go (--report_to, TRL's name): one small class per backend, all fed by rl.log.metrics.MetricsLogger
on rank 0 only (the other ranks build none).

- jsonl: OUTPUT_DIR/metrics.jsonl (one strict-JSON object per step) and completions.jsonl; the default, as before
  --report_to existed.
- tensorboard: event files in --tensorboard_path (default OUTPUT_DIR/tensorboard); DeepSpeed-Chat's
  --enable_tensorboard adds it to whatever --report_to names.
- wandb: Weights & Biases, optional (requirements-wandb.txt). `WANDB_MODE=offline` writes the run under
  OUTPUT_DIR/wandb without a network, for `wandb sync` later; the run id is kept in OUTPUT_DIR/wandb_run_id so a
  resumed run continues the same W&B run.
- none: no metrics files (the console line stays).

The default is jsonl and tensorboard (TensorBoard's events cost a few milliseconds a step). Besides the metrics, rank
0's console goes to OUTPUT_DIR/training.log (start_training_log), as scripts/train.sh's own log does.
"""
import json
import math
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field

import psutil

REPORT_TO_CHOICES = ("jsonl", "tensorboard", "wandb", "none")
DEFAULT_REPORT_TO = "jsonl,tensorboard"
WANDB_ID_FILE = "wandb_run_id"
TRAINING_LOG = "training.log"


def add_logger_flags(p):
    g = p.add_argument_group("loggers (rank 0 only)")
    g.add_argument("--report_to", default=DEFAULT_REPORT_TO,
                   help="comma list of metric loggers: jsonl (OUTPUT_DIR/metrics.jsonl, completions.jsonl), "
                        "tensorboard (OUTPUT_DIR/tensorboard), wandb (pip install -r requirements-wandb.txt; "
                        "WANDB_MODE=offline needs no network), or none (TRL's report_to); default jsonl,tensorboard. "
                        "--enable_tensorboard adds tensorboard")
    g.add_argument("--wandb_project", default=None,
                   help="W&B project; default $WANDB_PROJECT, else credo")
    g.add_argument("--wandb_run_name", default=None, help="W&B run name; default the name of OUTPUT_DIR")


def report_backends(report_to: str, enable_tensorboard: bool) -> tuple:
    """The logger names, in a fixed order, from --report_to and --enable_tensorboard. Raises ValueError naming the
    bad value. Pure function."""
    names = [n.strip() for n in report_to.split(",") if n.strip()]
    unknown = [n for n in names if n not in REPORT_TO_CHOICES]
    if unknown or not names:
        raise ValueError(f"--report_to {report_to!r}: unknown logger {', '.join(unknown) or '(empty)'}; choose a "
                         f"comma list of {', '.join(REPORT_TO_CHOICES)}")
    if "none" in names:
        if len(set(names)) > 1 or enable_tensorboard:
            raise ValueError(f"--report_to {report_to!r}: none cannot be combined with another logger"
                             + (" (or --enable_tensorboard)" if enable_tensorboard else ""))
        return ()
    if enable_tensorboard:
        names.append("tensorboard")
    return tuple(n for n in REPORT_TO_CHOICES if n in names)


def validate_loggers(args, bad):
    """Parse-time checks: known names, TensorBoard's folder only with TensorBoard, wandb installed."""
    try:
        backends = report_backends(args.report_to, args.enable_tensorboard)
    except ValueError as exc:
        bad(str(exc))
    if args.tensorboard_path is not None and "tensorboard" not in backends:
        bad("--tensorboard_path is set but TensorBoard is off: add --enable_tensorboard or --report_to tensorboard")
    if "wandb" in backends:
        try:
            import wandb  # noqa: F401
        except ImportError:
            bad("--report_to wandb: the wandb package is not installed; pip install -r requirements-wandb.txt, or "
                "drop wandb from --report_to")


@dataclass(frozen=True)
class WandbSettings:
    project: str = None     # --wandb_project (None: $WANDB_PROJECT, else credo)
    run_name: str = None    # --wandb_run_name (None: the output folder's name)
    config: dict = field(default_factory=dict)  # the run's flags, shown as the W&B run config

    @classmethod
    def from_args(cls, args, config: dict) -> "WandbSettings":
        """config: the run's flags as JSON values (rl.run.saved_config.plain_flags)."""
        return cls(project=args.wandb_project, run_name=args.wandb_run_name, config=config)


def _scalars(record: dict):
    """(name, value) of the finite numbers of a step record (step excluded): what TensorBoard and W&B plot."""
    return [(k, v) for k, v in record.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


class JsonlLogger:
    def __init__(self, output_dir: str, start_step: int):
        """Lines of steps after start_step (left by a run that died after its last checkpoint) are dropped, so no
        step appears twice when the resumed run logs them again."""
        self.path = os.path.join(output_dir, "metrics.jsonl")
        self.completions_path = os.path.join(output_dir, "completions.jsonl")
        for path in (self.path, self.completions_path):
            if os.path.exists(path):
                kept = [r for r in read_metrics(path) if r["step"] <= start_step]
                with open(path, "w") as f:
                    f.writelines(to_json_line(r) for r in kept)

    def log(self, step: int, record: dict):
        with open(self.path, "a") as f:
            f.write(to_json_line(record))

    def log_completions(self, step: int, records: list):
        with open(self.completions_path, "a") as f:
            f.writelines(to_json_line({"step": step, **r}) for r in records)

    def close(self):
        pass


class TensorBoardLogger:
    def __init__(self, path: str):
        from torch.utils.tensorboard import SummaryWriter
        self.writer = SummaryWriter(path)

    def log(self, step: int, record: dict):
        for k, v in _scalars(record):
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def log_completions(self, step: int, records: list):
        self.writer.add_text("completions", markdown_table(records), step)
        self.writer.flush()

    def close(self):
        self.writer.close()


def markdown_table(records: list) -> str:
    """TensorBoard renders text entries as markdown: one row per completion record (rl/log/step_metrics.py)."""
    def cell(value):
        return str(value).replace("|", "\\|").replace("\n", "<br>")

    lines = ["| group | prompt | completion | reward | advantage |", "|---|---|---|---|---|"]
    lines += [f"| {r['group']} | {cell(r['prompt'])} | {cell(r['completion'])} | {cell(r['reward'])} | "
              f"{cell(r['advantage'])} |" for r in records]
    return "\n".join(lines)


class WandbLogger:
    """One W&B run per output folder. Online or offline as wandb itself decides (WANDB_MODE, `wandb login`)."""

    def __init__(self, output_dir: str, start_step: int, settings: WandbSettings):
        import wandb
        id_path = os.path.join(output_dir, WANDB_ID_FILE)
        run_id = None
        if start_step > 0 and os.path.exists(id_path):  # a resumed run continues its W&B run
            with open(id_path) as f:
                run_id = f.read().strip() or None
        run_id = run_id or uuid.uuid4().hex[:8]  # W&B's own id form: 8 lowercase letters and digits
        with open(id_path, "w") as f:
            f.write(run_id + "\n")
        try:
            self.run = wandb.init(project=settings.project or os.environ.get("WANDB_PROJECT") or "credo",
                                  name=settings.run_name or os.path.basename(os.path.abspath(output_dir)),
                                  id=run_id, resume="allow", dir=output_dir, config=settings.config)
        except Exception as exc:  # noqa: BLE001  (wandb raises its own UsageError / CommError kinds)
            raise SystemExit(f"train.py: error: --report_to wandb: wandb.init failed: {exc}. Without a network or a "
                             f"`wandb login`, set WANDB_MODE=offline (the run is written under {output_dir}/wandb "
                             f"for `wandb sync`)") from None

    def log(self, step: int, record: dict):
        self.run.log(dict(_scalars(record)), step=step)

    def log_completions(self, step: int, records: list):
        import wandb
        columns = list(records[0])
        rows = [[json.dumps(r.get(c)) if isinstance(r.get(c), (dict, list)) else r.get(c) for c in columns]
                for r in records]
        self.run.log({"completions": wandb.Table(columns=columns, data=rows)}, step=step)

    def close(self):
        self.run.finish()


def build_loggers(backends: tuple, output_dir: str, start_step: int, tensorboard_path: str = None,
                  wandb_settings: WandbSettings = None) -> list:
    """The logger objects for these backend names (rank 0 calls it; the other ranks log nothing)."""
    out = []
    for name in backends:
        if name == "jsonl":
            out.append(JsonlLogger(output_dir, start_step))
        elif name == "tensorboard":
            out.append(TensorBoardLogger(tensorboard_path or os.path.join(output_dir, "tensorboard")))
        elif name == "wandb":
            out.append(WandbLogger(output_dir, start_step, wandb_settings or WandbSettings()))
    return out


# --- OUTPUT_DIR/training.log: what rank 0 printed ---
# A run started with `python train.py` or `deepspeed train.py` keeps its console in its folder, as scripts/train.sh
# does with tee. The file descriptors 1 and 2 themselves go through `tee -a` (one per stream, so the console keeps
# stdout and stderr apart), so the output of the reward workers, the sandbox and DeepSpeed's C++ is kept too. Each tee
# runs in its own session: a terminal's Ctrl-C or `timeout`'s signal to the process group must not end the log (and
# break the run's stdout) while the run saves; a tee ends when the last writer of its pipe has gone.

_tees = {}  # fd -> (the fd it had before, the tee process, the log's path)


def _written_already(path: str) -> bool:
    """Whether path is being written by someone else: a launcher script's tee, or this process's own stdout or
    stderr (benchmarks hand a child the log file as its output)."""
    real = os.path.realpath(path)
    if not os.path.exists(real):
        return False
    for fd in (1, 2):
        if os.path.exists(f"/proc/self/fd/{fd}") and os.path.realpath(f"/proc/self/fd/{fd}") == real:
            return True
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and any(f.path == real for f in proc.open_files()):
                return True
        except psutil.Error:
            continue
    return False


def start_training_log(output_dir: str) -> bool:
    """Rank 0: from here on, this process's stdout and stderr also go to OUTPUT_DIR/training.log (appended); not where
    something writes that file already. True when it started."""
    path = os.path.join(output_dir, TRAINING_LOG)
    if _tees or _written_already(path):
        return False
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        stream.flush()
        saved = os.dup(fd)
        tee = subprocess.Popen(["tee", "-a", path], stdin=subprocess.PIPE, stdout=saved, close_fds=True,
                               start_new_session=True)
        os.dup2(tee.stdin.fileno(), fd)
        tee.stdin.close()  # fd is now the pipe's only write end here
        _tees[fd] = (saved, tee, path)
    return True


def close_training_log(ending: BaseException = None):
    """Give stdout and stderr their own descriptors back and let the tees finish (train.py, at the end of a run).
    `ending`: the exception ending the run; a SystemExit's message, which the interpreter prints after this, is
    appended to the log here."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    path = None
    for fd, (saved, tee, path) in list(_tees.items()):
        os.dup2(saved, fd)
        os.close(saved)
        try:  # a reward worker that outlives the run still holds the pipe: the tee ends with it
            tee.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        del _tees[fd]
    if path and isinstance(ending, SystemExit) and isinstance(ending.code, str) and os.path.isdir(os.path.dirname(path)):
        with open(path, "a") as f:
            f.write(ending.code + "\n")


# --- the JSONL files' strict-JSON line format (metrics.jsonl, completions.jsonl) ---

def _finite_or_null(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite_or_null(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite_or_null(x) for x in v]
    return v


def to_json_line(record: dict) -> str:
    """One strict-JSON line: non-finite numbers become null (allow_nan=False makes any that slipped through an
    error here rather than a file other tools cannot read)."""
    return json.dumps(_finite_or_null(record), allow_nan=False) + "\n"


def read_metrics(path: str) -> list:
    """The records of a metrics.jsonl (or completions.jsonl); a null is a value that was not finite."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def add_log_flags(p):
    """What a run logs besides the metrics' backends."""
    g = p.add_argument_group("log: TensorBoard and completions")
    g.add_argument("--enable_tensorboard", action="store_true",
                   help="write TensorBoard events (DeepSpeed-Chat's flag: adds tensorboard to --report_to); off")
    g.add_argument("--tensorboard_path", default=None, help="TensorBoard folder; default OUTPUT_DIR/tensorboard")
    g.add_argument("--log_completions", type=int, default=2,
                   help="sampled completions per step written to OUTPUT_DIR/completions.jsonl (and TensorBoard text "
                        "with --enable_tensorboard), 0 = none")


def validate_log(args, bad):
    """--log_completions, the --report_to backends, and TensorBoard's folder (OUTPUT_DIR/tensorboard by default)."""
    if args.log_completions < 0:
        bad(f"--log_completions must be >= 0, got {args.log_completions}")
    validate_loggers(args, bad)  # --report_to, --tensorboard_path
    if args.tensorboard_path is None and args.output_dir is not None:  # else set with the default output dir
        args.tensorboard_path = os.path.join(args.output_dir, "tensorboard")
