"""credo's supervised fine-tuning entry point (DeepSpeed-Chat's step 1): `deepspeed sft.py --data_path ...`.

Its final/ export is what `train.py --model_name_or_path` (step 3, RL) and `eval.py` take. docs/sft.md."""
import logging
import sys

from rl.run.launch_ranks import stop_with_launcher
from rl.sft.config import parse_args


def main(argv=None):
    stop_with_launcher()
    args = parse_args(argv)  # bad flags are refused here, before any model is loaded
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from rl.engine import dist
    from rl.errors import TrainingAborted
    from rl.rollout.data_files import DataError
    from rl.run.heartbeat import lost_ranks_named
    from rl.sft.trainer import SFTTrainer
    try:
        with lost_ranks_named():  # a lost rank is named, with the checkpoint to resume from
            SFTTrainer(args).fit()
    except DataError as exc:
        sys.exit(f"sft.py: error: bad training data: {exc}")
    except TrainingAborted as exc:
        sys.exit(f"sft.py: stopped: {exc}")
    dist.shutdown()


if __name__ == "__main__":
    main()
    from rl.engine.dist import exit_after_success
    exit_after_success()
