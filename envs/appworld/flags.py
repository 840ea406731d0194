"""train.py / eval.py flags for --env appworld. They are exported as the CREDO_APPWORLD_* variables the env reads
when each episode is made (flags win over the environment), so every rank process sees the same settings."""
import os

FLAGS = {"appworld_backend": "BACKEND", "appworld_url": "URL", "appworld_score": "SCORE"}


def add_appworld_flags(parser):
    g = parser.add_argument_group("AppWorld (--env appworld)")
    g.add_argument("--appworld_backend", choices=("lite", "remote"), default=None,
                   help="lite: the offline stand-in; remote: real AppWorld servers (default: $CREDO_APPWORLD_BACKEND or lite)")
    g.add_argument("--appworld_url", default=None,
                   help="remote servers, comma-separated, one episode each at a time (default: $CREDO_APPWORLD_URL)")
    g.add_argument("--appworld_score", choices=("fraction", "success"), default=None,
                   help="a turn's score: fraction of checks passed, or 1/0 success (default: $CREDO_APPWORLD_SCORE or fraction)")


def export_appworld_flags(args):
    for flag, name in FLAGS.items():
        value = getattr(args, flag, None)
        if value is not None:
            os.environ[f"CREDO_APPWORLD_{name}"] = value
