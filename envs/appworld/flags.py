"""train.py / eval.py flags for --env appworld, and the settings every AppWorld env of a run is built with.

The settings reach the env as constructor (and `dataset`) arguments through `AppWorldEnv.settings_from_args`, never
through os.environ: every rank parses the same flags and so builds the same envs. The CREDO_APPWORLD_* variables
still work, as the flags' defaults, read once when the parser is built (so the run's config records what was used).
"""
import os

BACKENDS = ("lite", "remote")
SCORES = ("fraction", "success")
DEFAULT_URL = "http://127.0.0.1:8000"
CELL_TIMEOUT_VARIABLE = "CREDO_APPWORLD_CELL_TIMEOUT"  # read by envs/appworld/lite/backend.py
# flag -> (environment variable giving its default, the constructor / dataset keyword it fills)
SETTINGS = {"appworld_backend": ("CREDO_APPWORLD_BACKEND", "backend"),
            "appworld_url": ("CREDO_APPWORLD_URL", "url"),
            "appworld_score": ("CREDO_APPWORLD_SCORE", "score"),
            "appworld_eval_split": ("CREDO_APPWORLD_EVAL_SPLIT", "eval_split"),
            "appworld_tasks_dir": ("CREDO_APPWORLD_TASKS_DIR", "tasks_dir")}


def _default(flag: str):
    return os.environ.get(SETTINGS[flag][0]) or None


def add_appworld_flags(parser):
    g = parser.add_argument_group(
        "AppWorld (--env appworld)",
        f"${CELL_TIMEOUT_VARIABLE} sets the lite backend's seconds per code cell (default 5; keep a step's cell, "
        "judging and start-up under --reward_timeout)")
    g.add_argument("--appworld_backend", choices=BACKENDS, default=_default("appworld_backend"),
                   help="lite: the offline stand-in; remote: real AppWorld servers (default: $CREDO_APPWORLD_BACKEND or lite)")
    g.add_argument("--appworld_url", default=_default("appworld_url"),
                   help=f"remote servers, comma-separated, one episode each at a time (default: $CREDO_APPWORLD_URL or "
                        f"{DEFAULT_URL})")
    g.add_argument("--appworld_score", choices=SCORES, default=_default("appworld_score"),
                   help="a turn's score: fraction of checks passed, or 1/0 success (default: $CREDO_APPWORLD_SCORE or fraction)")
    g.add_argument("--appworld_eval_split", default=_default("appworld_eval_split"),
                   help="the split eval.py's `eval` means (default: $CREDO_APPWORLD_EVAL_SPLIT, or test for lite, "
                        "test_normal for remote)")
    g.add_argument("--appworld_tasks_dir", default=_default("appworld_tasks_dir"),
                   help="remote only: a folder of <split>.txt task-id lists, AppWorld's data/datasets (default: "
                        "$CREDO_APPWORLD_TASKS_DIR; without it pass --data_path)")


def check_appworld_flags(args, bad) -> None:
    """Refuse a bad value that argparse's choices cannot see: one that came from a CREDO_APPWORLD_* variable."""
    for flag, allowed in (("appworld_backend", BACKENDS), ("appworld_score", SCORES)):
        value = getattr(args, flag, None)
        if value is not None and value not in allowed:
            bad(f"--{flag} (here from ${SETTINGS[flag][0]}) must be one of {', '.join(allowed)}, got {value!r}")
    cell_timeout = os.environ.get(CELL_TIMEOUT_VARIABLE)
    if cell_timeout is not None and not _positive_number(cell_timeout):
        bad(f"${CELL_TIMEOUT_VARIABLE} must be a positive number of seconds, got {cell_timeout!r}")


def _positive_number(text: str) -> bool:
    try:
        return float(text) > 0
    except ValueError:
        return False


def appworld_settings(args) -> dict:
    """The keywords AppWorldEnv and AppWorldEnv.dataset take, from the parsed flags (unset ones left out)."""
    return {keyword: getattr(args, flag) for flag, (_, keyword) in SETTINGS.items()
            if getattr(args, flag, None) is not None}
