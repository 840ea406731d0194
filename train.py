"""credo training entry point: `deepspeed train.py --algo grpo ...` (see README and scripts/train.sh)."""
import logging

from rl.config import parse_args


def main(argv=None):
    args = parse_args(argv)  # bad flags are refused here, before any model is loaded
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from rl.trainer import Trainer  # heavy imports (torch, deepspeed) only after the flags are known to be good
    Trainer(args).fit()


if __name__ == "__main__":
    main()
