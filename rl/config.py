"""train.py's flags, composed: the run's identity here, and each room's own group (its add_*_flags and validate_*
beside the code that reads them), in the order of one step. Also the parser a newcomer meets: a wrong flag is
answered in a few lines, --help prints each default once.

System knobs keep DeepSpeed-Chat's names; method knobs keep verl/TRL names.
"""
import argparse
import difflib
import os
import re
import sys

from envs import ENVS, env_class_from_flags
from envs.base import resolve_env_defaults
from envs.appworld.flags import add_appworld_flags
from envs.toolcall import add_toolcall_env_flags
from rewards.registry import CORRECTNESS
from rewards.policy_rewards import add_policy_reward_flags
from rewards.toolcall import add_toolcall_reward_flags
from rl.engine.actor import add_engine_flags, validate_engine
from rl.engine.lora import add_lora_flags, validate_lora
from rl.engine.models import DEFAULT_MODEL_DIR, is_local_model_path
from rl.eval.validation import add_validation_flags, validate_validation
from rl.log.loggers import add_log_flags, add_logger_flags, validate_log
from rl.methods import METHODS, method_class
from rl.methods.base import add_advantage_flags
from rl.rollout.data import add_data_flags, check_first_row, validate_data_keys
from rl.rollout.data_files import check_data_path
from rl.rollout.dynamic_sampling import add_dynamic_sampling_flags, validate_dynamic_sampling
from rl.rollout.episode_end import add_episode_flags, check_env_supports, resolve_episode_end, validate_episodes
from rl.rollout.samplers import add_sampling_flags, validate_sampling
from rl.rollout.vllm.flags import add_vllm_flags, validate_rollout_backend
from rl.run.start import add_run_flags, validate_run
from rl.scoring import add_reward_flags, validate_rewards
from rl.update.length_shaping import add_length_shaping_flags, validate_length_shaping
from rl.update.ppo import add_update_flags, validate_update
from rl.update.rollout_correction import add_rollout_correction_flags
from rl.update.step_guard import add_step_guard_flags, validate_step_guard


# TRL's GRPOConfig / TrainingArguments names a newcomer types, answered with credo's (not accepted as aliases: several
# count differently, e.g. TRL's per_device_train_batch_size counts completions, credo's batch counts prompts).
TRL_NAMES = {
    "--learning_rate": "--actor_learning_rate",
    "--weight_decay": "--actor_weight_decay",
    "--warmup_steps": "--num_warmup_steps",
    "--max_grad_norm": "--gradient_clipping",
    "--max_completion_length": "--max_answer_seq_len",
    "--max_prompt_length": "--max_prompt_seq_len",
    "--per_device_train_batch_size": "--per_device_generation_batch_size (prompts per rank; each gets "
                                     "--num_generations responses)",
    "--gradient_accumulation_steps": "--per_device_train_micro_batch_size (the update accumulates over micro-batches "
                                     "of one rollout batch)",
    "--num_iterations": "--ppo_epochs",
    "--num_train_epochs": "--max_steps",
    "--epsilon": "--clip_ratio_low",
    "--epsilon_high": "--clip_ratio_high",
    "--loss_type": "--loss_agg_mode (grpo, bnpo, dr_grpo, dapo) or --loss_mode (cispo, sapo)",
    "--importance_sampling_level": "--loss_mode gspo (sequence level)",
    "--steps_per_generation": "--ppo_mini_batch_size (prompts per optimizer step, as verl counts it)",
    "--bf16": "--dtype bf16",
    "--fp16": "--dtype fp16",
    "--use_vllm": "--rollout_backend vllm",
    "--dataset_name": "--data_path",
    "--logging_dir": "--tensorboard_path",
    "--model_name": "--model_name_or_path",
}


class HelpFormatter(argparse.HelpFormatter):
    """Each default once: appended only where the help does not already say it, never `None`, booleans as on/off,
    and paths inside the checkout shown relative to it (the default model is .cache/models/..., not an absolute
    path of the machine that printed the help)."""

    def _get_help_string(self, action):
        text = (action.help or "").replace(" (default: %(default)s)", "")  # BooleanOptionalAction adds its own
        default = action.default
        if not action.option_strings or default in (None, argparse.SUPPRESS) or "default" in text.lower():
            return text
        if isinstance(action, argparse.BooleanOptionalAction) or isinstance(default, bool):
            if default is False and action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction):
                return text  # a plain switch: off unless given
            return f"{text} (default: {'on' if default else 'off'})"
        if isinstance(default, str) and os.path.isabs(default):
            from rl import REPO_ROOT
            if default.startswith(REPO_ROOT + os.sep):
                default = os.path.relpath(default, REPO_ROOT)
        return f"{text} (default: {str(default).replace('%', '%%')})"


# What `train.py --help` shows (TRL's and verl's users read a few dozen flags); `--help-all` shows every flag, grouped.
COMMON_FLAGS = frozenset("""--algo --env --model_name_or_path --max_steps --seed --data_path --prompt_key --answer_key
--num_generations --per_device_generation_batch_size --max_prompt_seq_len --max_answer_seq_len --temperature --top_p
--max_turns --reward_funcs --reward_weights --beta --clip_ratio_low --clip_ratio_high --loss_agg_mode --ppo_epochs
--actor_learning_rate --num_warmup_steps --actor_zero_stage --offload --dtype --output_dir --save_strategy --save_steps
--resume --report_to --eval_steps""".split())


class _HelpAction(argparse.Action):
    """-h / --help: the common flags only (`--help-all`: every flag)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.print_help(common_only=option_string != "--help-all")
        parser.exit()


class CredoArgumentParser(argparse.ArgumentParser):
    """argparse with a short refusal: the bad flag, the nearest credo flag (or credo's name for a TRL one), and a
    pointer to --help, instead of the whole usage block. With `common_flags`, --help shows those and --help-all every
    flag."""

    def __init__(self, *args, common_flags=None, **kwargs):
        self.common_flags = common_flags
        super().__init__(*args, add_help=common_flags is None, **kwargs)
        if common_flags is not None:
            self.add_argument("-h", "--help", action=_HelpAction, help="show the common flags and exit")
            self.add_argument("--help-all", action=_HelpAction, help="show every flag, grouped, and exit")

    def format_help(self, common_only: bool = False) -> str:
        if not common_only or self.common_flags is None:
            return super().format_help()
        hidden = [a for a in self._actions if a.option_strings and a.help is not argparse.SUPPRESS
                  and not (set(a.option_strings) & (self.common_flags | {"--help", "--help-all"}))]
        saved = [a.help for a in hidden]
        for a in hidden:
            a.help = argparse.SUPPRESS
        try:
            text = super().format_help()
        finally:
            for a, text_of in zip(hidden, saved):
                a.help = text_of
        return (text + f"\n{len(hidden)} more flags (each method's knobs, the update's, DAPO, vLLM, LoRA, AppWorld, tool "
                f"calling, logging, validation): `{self.prog} --help-all` lists every flag, grouped.\n")

    def print_help(self, file=None, common_only: bool = False):
        self._print_message(self.format_help(common_only), file or sys.stdout)

    def error(self, message):
        lines = [f"{self.prog}: error: {message}"]
        unknown = re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", message.split(":", 1)[1]) \
            if message.startswith("unrecognized arguments") else []
        known = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        for flag in dict.fromkeys(unknown):
            name = flag.split("=", 1)[0]
            if name in TRL_NAMES:
                lines.append(f"  {name} is TRL's name; credo's is {TRL_NAMES[name]}")
                continue
            close = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
            if close:
                lines.append(f"  {name}: did you mean {' or '.join(close)}?")
        every = "--help-all" if self.common_flags is not None else "--help"
        lines.append(f"  `{os.path.basename(sys.argv[0]) or self.prog} {every}` lists every flag")
        self.exit(2, "\n".join(lines) + "\n")


# --env's help: one phrase per built-in env (a registered env without one is listed by name)
ENV_SUMMARIES = {"arith": "synthetic sums, CPU default", "arith_multi": "three sums, graded score",
                 "math": "math-verify on --data_path rows", "code": "sandboxed tests as feedback",
                 "mixed": "arith + free-form, for MAESTRO", "appworld": "tool-use tasks",
                 "toolcall": "BFCL function calls scored by its AST checker"}


def build_parser() -> argparse.ArgumentParser:
    """train.py's flags: the run's identity here, then each room's own group, in the order of a step."""
    p = CredoArgumentParser(
        prog="train.py",
        description="credo: verifier-guided RL on one DeepSpeed ZeRO-3 actor. Launch with `deepspeed train.py ...`.",
        usage="%(prog)s [--flag value ...]", formatter_class=HelpFormatter, allow_abbrev=False,
        common_flags=COMMON_FLAGS)

    g = p.add_argument_group("run: method, env, model, length")
    g.add_argument("--algo", choices=tuple(METHODS), default="grpo",
                   help="credit-assignment method (rl/methods/<name>.py): "
                        + "; ".join(f"{name}: {cls.summary}" for name, cls in METHODS.items()))
    g.add_argument("--env", default="arith",
                   help="environment: " + ", ".join(f"{name} ({ENV_SUMMARIES[name]})" if name in ENV_SUMMARIES
                                                    else name for name in sorted(ENVS))
                        + ", or your own Env subclass as package.module:Class (envs/README.md)")
    g.add_argument("--model_name_or_path", default=DEFAULT_MODEL_DIR,
                   help="HF causal LM folder or hub id; default: SmolLM2-135M-Instruct converted by scripts/setup.sh")
    g.add_argument("--max_steps", type=int, default=24, help="training steps (one rollout batch each)")
    g.add_argument("--seed", type=int, default=1234, help="seed of data order, sampling and init")
    g.add_argument("--enable_test_mode", action="store_true", help="stop after --test_stop_step steps (smoke tests)")
    g.add_argument("--test_stop_step", type=int, default=3, help="steps run under --enable_test_mode")
    g.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")

    # each room's own flags, in the order of one step: rollout, score, advantages, update, then the machinery
    add_data_flags(p)
    add_sampling_flags(p)
    add_episode_flags(p, fixed_turn_methods=[n for n, cls in METHODS.items() if cls.fixed_turns],
                      trajectory_methods=[n for n, cls in METHODS.items() if not cls.turn_level])
    add_dynamic_sampling_flags(p)
    add_vllm_flags(p)
    add_appworld_flags(p)
    add_toolcall_env_flags(p)
    add_reward_flags(p)
    add_policy_reward_flags(p)
    add_toolcall_reward_flags(p)
    add_advantage_flags(p)
    for cls in METHODS.values():  # each method's own argument group (rl/methods/)
        cls.add_flags(p)
    add_update_flags(p)
    add_length_shaping_flags(p)
    add_rollout_correction_flags(p)
    add_step_guard_flags(p)
    add_engine_flags(p)
    add_lora_flags(p)
    add_run_flags(p)
    add_logger_flags(p)
    add_log_flags(p)
    add_validation_flags(p)
    return p


def validate(args) -> None:
    """Refuse bad combinations with a message naming the flag; called right after parsing. Each room checks its
    own flags (and resolves their defaults); what spans rooms (the env, the model, the method) is checked here."""
    def bad(msg):
        raise SystemExit(f"train.py: error: {msg}")

    method = method_class(args.algo)
    env_cls = env_class_from_flags(args, bad)
    validate_data_keys(args, env_cls, bad)  # before the env's defaults fill --prompt_key / --answer_key in
    resolve_env_defaults(args, env_cls, eval_data_flag="eval_data_path" if args.eval_steps else None)
    validate_rewards(args, method, bad)
    for cls in METHODS.values():  # a method's flags given under another --algo, and its resolved defaults
        cls.check_flags(args, bad)
    validate_episodes(args, method, CORRECTNESS, bad)
    validate_sampling(args, bad)
    method.validate(args, bad)
    # whether a frozen reference is loaded: the KL term, or a method that reads it itself (Method.needs_reference)
    args.uses_reference = args.beta != 0 or method.needs_reference(args)
    if args.max_steps < 1:
        bad(f"--max_steps must be >= 1, got {args.max_steps}")
    validate_update(args, bad)
    validate_engine(args, bad)
    validate_step_guard(args, bad)
    validate_run(args, bad)
    check_data_path(args, bad)
    check_first_row(args, env_cls, bad)  # a JSONL file's first row, as loading checks every row
    args.episode_end_given, args.episode_end = args.episode_end, resolve_episode_end(args.episode_end,
                                                                                     method.fixed_turns)
    check_env_supports(args, env_cls, bad)
    if args.data_path is None and env_cls.dataset("train", 1, args.seed, **env_cls.settings_from_args(args)) is None:
        bad(f"--env {args.env} has no data of its own: pass --data_path")
    if is_local_model_path(args.model_name_or_path):
        args.model_name_or_path = os.path.expanduser(args.model_name_or_path)
        if not os.path.exists(args.model_name_or_path):
            hint = (" (run `bash scripts/setup.sh` to convert the default model)"
                    if args.model_name_or_path == DEFAULT_MODEL_DIR else "")
            bad(f"--model_name_or_path {args.model_name_or_path} does not exist{hint}")
    validate_log(args, bad)
    validate_lora(args, bad)
    validate_validation(args, env_cls, bad)
    validate_dynamic_sampling(args, method, bad)
    validate_length_shaping(args, method, bad)
    validate_rollout_backend(args, bad)


def parser_defaults() -> dict:
    """Every flag's default, as a run's saved config compares them (rl/run/start.py)."""
    return vars(build_parser().parse_args([]))


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    validate(args)
    return args
