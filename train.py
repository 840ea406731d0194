"""credo training entry point: `deepspeed train.py --algo grpo ...` (see README and scripts/train.sh)."""
import logging
import sys

from rl.config import parse_args
from rl.run.launch_ranks import stop_with_launcher


def main(argv=None):
    stop_with_launcher()  # a rank whose deepspeed launch process is killed stops (after saving) instead of training on
    args = parse_args(argv)  # bad flags are refused here, before any model is loaded
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # heavy imports (torch, deepspeed) only once the flags are known to be good
    from rl.rollout.data import DataError
    from rl.errors import TrainingAborted
    from rl.trainer import Trainer
    from rl.engine import dist
    from rl.run.heartbeat import lost_ranks_named
    from rl.run.start import discard_failed_start
    from rl.log.loggers import close_training_log
    try:
        # a run that fails before its first step leaves no folder behind; a lost rank is named, with the checkpoint
        with discard_failed_start(), lost_ranks_named():
            Trainer(args).fit()
    except DataError as exc:
        sys.exit(f"train.py: error: bad training data: {exc}")
    except TrainingAborted as exc:
        sys.exit(f"train.py: stopped: {exc}")
    finally:
        close_training_log(sys.exc_info()[1])  # stdout and stderr get their own descriptors back (rl/log/loggers.py)
    dist.shutdown()  # on success only (see rl/engine/dist.py)


if __name__ == "__main__":
    main()
    from rl.engine.dist import exit_after_success
    exit_after_success()  # a failure exits above, through sys.exit or an exception
