"""sft.py's flags: the data and batch of supervised fine-tuning here, and the rooms it shares with train.py (engine
and optimiser, LoRA, run folder and checkpoints, loggers, the non-finite step guard) under the same names, so a
run's system flags read the same in both steps (DeepSpeed-Chat's step 1 and step 3 share theirs)."""
import argparse
import os

from envs import ENVS, env_class_from_flags
from envs.base import resolve_env_defaults
from envs.toolcall import add_toolcall_env_flags
from rl.config import CredoArgumentParser, HelpFormatter
from rl.engine.actor import add_engine_flags, validate_engine
from rl.engine.lora import add_lora_flags, validate_lora
from rl.engine.models import DEFAULT_MODEL_DIR, is_local_model_path
from rl.log.loggers import add_log_flags, add_logger_flags, validate_log
from rl.rollout.data_files import DataError, data_paths
from rl.run.start import add_run_flags, validate_run
from rl.update.step_guard import add_step_guard_flags, validate_step_guard


def build_parser() -> argparse.ArgumentParser:
    p = CredoArgumentParser(
        prog="sft.py",
        description="credo's supervised fine-tuning (DeepSpeed-Chat's step 1): loss on the assistant tokens only, on "
                    "the actor train.py trains. Launch with `deepspeed sft.py ...`; its final/ export is what "
                    "`train.py --model_name_or_path` and `eval.py` take (docs/sft.md).",
        formatter_class=HelpFormatter, allow_abbrev=False)
    g = p.add_argument_group("sft: model, data, length")
    g.add_argument("--model_name_or_path", default=DEFAULT_MODEL_DIR, help="HF causal LM folder or hub id")
    g.add_argument("--env", default="arith",
                   help="the env whose rows --data_path holds when they are neither conversational ('messages') nor "
                        "prompt-completion (its sft_messages makes the target), whose train split is the data without "
                        "--data_path, and whose verifier scores the greedy eval: " + ", ".join(sorted(ENVS))
                        + ", or package.module:Class")
    g.add_argument("--data_path", default=None,
                   help="training rows in any format train.py reads (comma list to mix): {'messages': [...]} (every "
                        "assistant turn trained), {'prompt', 'completion'} (the completion trained; TRL's formats), or "
                        "the --env's own rows; default: the env's own train split")
    g.add_argument("--data_split", default="train", help="split of a --data_path folder that has several")
    g.add_argument("--num_train_samples", type=int, default=2000,
                   help="rows drawn from the env's own train split when there is no --data_path")
    g.add_argument("--skip_bad_rows", action="store_true", help="skip (and count) rows that cannot become examples")
    g.add_argument("--max_seq_len", type=int, default=1024,
                   help="tokens per example (DeepSpeed-Chat's name); a longer one is cut at its end, and dropped if "
                        "no trained token is left")
    g.add_argument("--packing", action="store_true",
                   help="pack examples into rows of --max_seq_len (best-fit decreasing, TRL's bfd), attention kept "
                        "within each example by restarting positions; off: one example per row")
    g.add_argument("--per_device_train_batch_size", type=int, default=4,
                   help="examples (or packed rows) per rank per forward/backward (DeepSpeed-Chat's name)")
    g.add_argument("--gradient_accumulation_steps", type=int, default=1,
                   help="micro-batches per optimizer step; one step takes batch x accumulation x ranks examples")
    g.add_argument("--num_train_epochs", type=float, default=1.0, help="passes over the data (when --max_steps is -1)")
    g.add_argument("--max_steps", type=int, default=-1,
                   help="optimizer steps; -1 = --num_train_epochs over the data (TRL's rule)")
    g.add_argument("--seed", type=int, default=1234, help="seed of the data order and init")
    g.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    e = p.add_argument_group("sft: held-out loss and the env's greedy eval")
    e.add_argument("--eval_data_path", default=None,
                   help="held-out rows for the eval loss (formats as --data_path); default: the env's held-out split "
                        "made into examples by its sft_messages, where it has one")
    e.add_argument("--eval_steps", type=int, default=0,
                   help="every N steps and after the last: eval/loss on the held-out rows and, where the env has a "
                        "verifier, its greedy eval (eval/pass@1 and the env's own metrics, as eval.py reports "
                        "them); 0 = only after the last step")
    e.add_argument("--eval_limit", type=int, default=64, help="held-out rows for the eval loss and the greedy eval")
    e.add_argument("--no_env_eval", action="store_true", help="skip the env's greedy eval (keep the eval loss)")
    e.add_argument("--max_prompt_seq_len", type=int, default=None,
                   help="greedy eval: prompts longer are left-truncated; default: the env's, else 1024")
    e.add_argument("--max_answer_seq_len", type=int, default=None,
                   help="greedy eval: new tokens per answer; default: the env's")
    add_toolcall_env_flags(p)
    add_engine_flags(p)
    add_lora_flags(p)
    add_step_guard_flags(p)
    add_run_flags(p)
    add_logger_flags(p)
    add_log_flags(p)
    return p


def validate(args) -> None:
    def bad(msg):
        raise SystemExit(f"sft.py: error: {msg}")

    args.algo = "sft"  # the run's kind, for its default folder (output/sft_<env>_<time>) and saved config
    env_cls = env_class_from_flags(args, bad)
    resolve_env_defaults(args, env_cls, fallback_max_prompt_seq_len=1024)
    for flag in ("max_seq_len", "per_device_train_batch_size", "gradient_accumulation_steps", "eval_limit"):
        if getattr(args, flag) < 1:
            bad(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.max_steps == 0 or args.max_steps < -1:
        bad(f"--max_steps must be >= 1, or -1 for --num_train_epochs, got {args.max_steps}")
    if args.max_steps == -1 and not args.num_train_epochs > 0:
        bad(f"--num_train_epochs must be > 0, got {args.num_train_epochs}")
    if args.eval_steps < 0:
        bad(f"--eval_steps must be >= 0, got {args.eval_steps}")
    for flag in ("data_path", "eval_data_path"):
        if getattr(args, flag) is not None:
            try:
                data_paths(getattr(args, flag))
            except DataError as exc:
                bad(f"--{flag}: {exc}")
    if is_local_model_path(args.model_name_or_path):
        args.model_name_or_path = os.path.expanduser(args.model_name_or_path)
        if not os.path.exists(args.model_name_or_path):
            bad(f"--model_name_or_path {args.model_name_or_path} does not exist"
                + (" (run `bash scripts/setup.sh`)" if args.model_name_or_path == DEFAULT_MODEL_DIR else ""))
    validate_engine(args, bad)
    validate_lora(args, bad)
    validate_step_guard(args, bad)
    validate_run(args, bad)
    validate_log(args, bad)


def parser_defaults() -> dict:
    return vars(build_parser().parse_args([]))


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    validate(args)
    return args
