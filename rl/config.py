"""Every flag of train.py, grouped by concern, and the checks that refuse bad combinations at parse time.

System knobs keep DeepSpeed-Chat's names; method knobs keep verl/TRL names.
"""
import argparse
import difflib
import os
import re
import sys

from rl.rollout.episode_end import EPISODE_END_CHOICES, check_env_supports, resolve_episode_end
from rl.update.loss import KL_TYPES, LOSS_AGG_MODES
from rl.methods import METHODS, method_class
from rl.methods.base import parse_weights
from rl.engine.models import DEFAULT_MODEL_DIR, is_local_model_path
from rl.scoring import add_policy_reward_flags, validate_open_domain_rewards
from rl.run.saved_config import DEFAULT_SAVE_STEPS, SAVE_COST

DECODE_LOOPS = ("credo", "hf_generate")
SAVE_STRATEGIES = ("steps", "final", "no")
# Default micro-batch cap: length-sorted micro-batches of 8 rows carry less padding than one 32-row block and bound
# the activation memory of long multi-turn rows. The GPU launchers (scripts/gpu/common.sh) set their own.
DEFAULT_MAX_MICRO_BATCH = 8


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
    "--loss_type": "--loss_agg_mode",
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


class CredoArgumentParser(argparse.ArgumentParser):
    """argparse with a short refusal: the bad flag, the nearest credo flag (or credo's name for a TRL one), and a
    pointer to --help, instead of the whole usage block."""

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
        lines.append(f"  `{os.path.basename(sys.argv[0]) or self.prog} --help` lists every flag")
        self.exit(2, "\n".join(lines) + "\n")


def build_parser() -> argparse.ArgumentParser:
    p = CredoArgumentParser(
        prog="train.py",
        description="credo: verifier-guided RL on one DeepSpeed ZeRO-3 actor. Launch with `deepspeed train.py ...`.",
        formatter_class=HelpFormatter, allow_abbrev=False)

    g = p.add_argument_group("method and data")
    g.add_argument("--algo", choices=tuple(METHODS), default="grpo",
                   help="credit-assignment method (rl/methods/<name>.py): "
                        + "; ".join(f"{name}: {cls.summary}" for name, cls in METHODS.items()))
    g.add_argument("--env", default="arith",
                   help="environment: arith (synthetic sums, CPU default), arith_multi (three sums, graded score), math "
                        "(math-verify on --data_path rows), code (sandboxed tests as feedback), mixed (arith + "
                        "free-form, for MAESTRO), appworld (tool-use tasks), or your own Env subclass as "
                        "package.module:Class (envs/README.md)")
    g.add_argument("--model_name_or_path", default=DEFAULT_MODEL_DIR,
                   help="HF causal LM folder or hub id; default: SmolLM2-135M-Instruct converted by scripts/setup.sh")
    g.add_argument("--data_path", default=None,
                   help="training rows: .jsonl, .json, .csv, .tsv, .parquet, .arrow, a save_to_disk folder or an HF "
                        "dataset folder, or a comma list of these to mix (required for --env math; arith generates "
                        "its own)")
    g.add_argument("--data_split", default="train",
                   help="split of a --data_path folder that has several (DatasetDict, HF dataset folder); a file is "
                        "read whole")
    g.add_argument("--prompt_key", default="problem",
                   help="field of a --data_path row holding the prompt (not needed when the env makes its own data)")
    g.add_argument("--answer_key", default="answer",
                   help="field of a --data_path row holding the reference answer (not needed when the env makes its "
                        "own data)")
    g.add_argument("--num_train_samples", type=int, default=20000, help="rows drawn for arith's train split")
    g.add_argument("--num_generations", type=int, default=4, help="group size G: responses sampled per prompt")
    g.add_argument("--per_device_generation_batch_size", type=int, default=8, help="prompts per rank per step")
    g.add_argument("--per_device_train_micro_batch_size", type=int, default=None,
                   help="responses per forward/backward (gradient accumulation over the rest); rows are sorted by "
                        "length and each micro-batch trimmed to its own padding (rl/update/batching.py). Default: the largest "
                        f"divisor of the rank's responses up to {DEFAULT_MAX_MICRO_BATCH}")
    g.add_argument("--max_prompt_seq_len", type=int, default=256, help="prompts longer than this are left-truncated")
    g.add_argument("--max_answer_seq_len", type=int, default=32, help="max new tokens per response")
    g.add_argument("--temperature", type=float, default=0.7, help="sampling temperature for rollouts")
    g.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling for rollouts")
    g.add_argument("--top_k", type=int, default=0, help="top-k sampling for rollouts (0 = off)")

    g = p.add_argument_group("rewards")
    g.add_argument("--reward_funcs", default="correctness",
                   help="comma list of rewards: correctness (the env's verifier), format, length, the open-domain "
                        "rewards fmt, ppl (NOVER), ent (EM-GRPO), len, pref (rewards/policy_rewards.py), or "
                        "package.module:function: credo's fn(prompt, completion, sample) returning a float, a dict of "
                        "components, or None to abstain, or TRL's f(prompts, completions, **kwargs) returning a list")
    g.add_argument("--reward_weights", default=None,
                   help="comma list, one weight per reward component (default 1 each); GRPO sums weighted components")
    g.add_argument("--format_style", default="boxed", help="format reward: boxed, tags, or a regular expression")
    g.add_argument("--length_limit", type=int, default=20,
                   help="length reward: 1 when the reasoning part (before the final answer) has at most this many words")
    g.add_argument("--code_workers", type=int, default=2,
                   help="env steps (verifier calls, sandboxed programs) run in parallel per rank")
    g.add_argument("--reward_timeout", type=float, default=10.0,
                   help="seconds per reward call (a --reward_funcs call, an env step); a call past it scores 0 and "
                        "counts as failed, and a --reward_funcs call's worker process is killed")
    g.add_argument("--reward_workers", type=int, default=8,
                   help="worker processes per rank running --reward_funcs calls at once, so a step whose calls all "
                        "hang costs about one --reward_timeout")
    g.add_argument("--final_norm", choices=("response", "token", "none"), default="response",
                   help="GDPO/DARA batch normalisation of the summed advantage (token = verl's masked whitening)")
    g = p.add_argument_group("multi-turn (verify and refine) and turn-level credit")
    g.add_argument("--max_turns", type=int, default=1,
                   help="turns per episode: after a wrong answer the env gives feedback and the model tries again")
    g.add_argument("--episode_end", choices=EPISODE_END_CHOICES, default="auto",
                   help="verify-and-refine envs: end at the first success, or play every --max_turns turn (a correct "
                        "turn is told so and may keep or improve its answer); auto = max_turns for "
                        + " and ".join(n for n, cls in METHODS.items() if cls.fixed_turns)
                        + " (their papers' protocol), success otherwise")
    g.add_argument("--traj_score", choices=("final", "best"), default="final",
                   help="trajectory reward for trajectory-level methods (" + ", ".join(
                       n for n, cls in METHODS.items() if not cls.turn_level) + ") on multi-turn envs")

    add_policy_reward_flags(p)
    for cls in METHODS.values():  # each method's own argument group (rl/methods/)
        cls.add_flags(p)

    from envs.appworld.flags import add_appworld_flags
    add_appworld_flags(p)

    from rl.log.loggers import add_logger_flags
    from rl.engine.lora import add_lora_flags
    from rl.eval.validation import add_validation_flags
    add_lora_flags(p)
    add_validation_flags(p)
    from rl.rollout.dapo_flags import add_dapo_flags
    add_dapo_flags(p)
    add_logger_flags(p)

    g = p.add_argument_group("optimisation")
    g.add_argument("--actor_learning_rate", type=float, default=2e-5, help="AdamW learning rate")
    g.add_argument("--actor_weight_decay", type=float, default=0.0, help="AdamW weight decay")
    g.add_argument("--lr_scheduler_type", choices=("constant", "linear", "cosine"), default="constant",
                   help="schedule after warmup")
    g.add_argument("--num_warmup_steps", type=int, default=0, help="linear warmup steps")
    g.add_argument("--max_steps", type=int, default=24, help="training steps (one rollout batch each)")
    g.add_argument("--ppo_epochs", type=int, default=1, help="optimizer passes over each rollout batch")
    g.add_argument("--skip_zero_advantage_rows", action=argparse.BooleanOptionalAction, default=True,
                   help="the update leaves out responses whose every token advantage is exactly 0 (a GRPO group "
                        "whose responses all scored alike): their policy-gradient term is exactly 0, so the step is "
                        "the same up to float rounding and its forward/backward cost falls by their share "
                        "(train/rows_skipped_frac); actor/entropy and clipfrac are then over the trained responses. "
                        "Never with --beta > 0, whose KL term they do carry. credo's reading: verl and TRL train on "
                        "every row")
    g.add_argument("--gradient_clipping", type=float, default=1.0, help="global grad-norm clip (0 = off)")
    g.add_argument("--seed", type=int, default=1234, help="seed of data order, sampling and init")

    g = p.add_argument_group("system (DeepSpeed)")
    g.add_argument("--actor_zero_stage", type=int, choices=(0, 1, 2, 3), default=None,
                   help="ZeRO stage of actor and reference. Default: 0 in one process (DeepSpeed-Chat's single_gpu "
                        "scripts; one-rank ZeRO-3 copies every micro-batch's gradients, rl/engine/zero_config.py), 3 on "
                        "several ranks or with --offload")
    g.add_argument("--offload", action="store_true", help="ZeRO-Offload of parameters and optimizer state to CPU")
    g.add_argument("--dtype", choices=("fp32", "bf16", "fp16", "auto"), default="auto",
                   help="training dtype; auto = bf16 on CUDA, and on a CPU only where a bf16 matmul probe measured >= 1.25x "
                        "fp32's speed on this machine (kept in .cache/hardware/; AVX2-only CPUs emulate bf16 at ~0.01x), "
                        "else fp32; printed at start. fp16 (loss-scaled) is CUDA only")
    g.add_argument("--enable_hybrid_engine", action="store_true",
                   help="DeepSpeed hybrid engine for generation (CUDA and an architecture whose DeepSpeed 0.19 "
                        "container fits transformers 5.x: bloom, gptj, gpt_neo, untested; not llama, gpt_neox, qwen, "
                        "opt: rl/engine/actor.py says why; elsewhere one warning and gather-and-generate)")
    g.add_argument("--gradient_checkpointing", action="store_true",
                   help="recompute each decoder layer's activations in backward (transformers' checkpointing, "
                        "use_reentrant=False): less activation memory for more compute")
    g.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")

    g = p.add_argument_group("rollout backend (GPU)")
    g.add_argument("--decode_loop", choices=DECODE_LOOPS, default="credo",
                   help="with --rollout_backend hf: credo = rl/rollout/decode.py (drops finished responses from the batch, "
                        "HF's logits warpers, inverse-CDF sampling; 1.5x faster on the CPU default: "
                        "benchmarks/results/decode_loop.md); hf_generate = transformers' model.generate. The hybrid "
                        "engine always uses its own generate")
    g.add_argument("--rollout_backend", choices=("hf", "vllm"), default="hf",
                   help="hf: the actor generates (ZeRO-3 gathered once, HF generate; or --enable_hybrid_engine); "
                        "vllm: a vLLM engine colocated in each rank, sleeping while the actor trains and loaded with "
                        "its weights after every update (CUDA and requirements-gpu.txt)")
    add_vllm_engine_flags(g)
    g.add_argument("--vllm_tensor_parallel_size", type=int, default=1,
                   help="GPUs sharing one vLLM engine (must divide the number of ranks); 1 = one engine per GPU")
    g.add_argument("--vllm_sleep_level", type=int, choices=(0, 1, 2), default=2,
                   help="how vLLM frees its GPU memory while the actor trains: 0 never, 1 weights to CPU, 2 discard "
                        "weights (they are reloaded from the actor before every rollout phase anyway)")
    g.add_argument("--vllm_is_correction", choices=("none", "tis"), default="none",
                   help="tis: truncated importance sampling, each token's loss x min(exp(logp_trainer - logp_vllm), "
                        "--vllm_is_cap), for the mismatch between vLLM's and the trainer's log-probs")
    g.add_argument("--vllm_is_cap", type=float, default=2.0, help="TIS weight cap C (verl's rollout_is_threshold: 2)")
    g.add_argument("--dist_timeout_minutes", type=float, default=30.0,
                   help="timeout of every collective of DeepSpeed's process group (and of the groups in which "
                        "credo shares prompts between tensor-parallel ranks); vLLM builds its own tensor-parallel "
                        "groups, which keep vLLM's timeouts")

    g = p.add_argument_group("loss")
    g.add_argument("--beta", type=float, default=0.0, help="KL coefficient to the frozen reference; 0 skips loading it")
    g.add_argument("--kl_type", choices=KL_TYPES, default="k3", help="KL estimator (k3 = verl low_var_kl)")
    g.add_argument("--clip_ratio_low", type=float, default=0.2, help="PPO clip below 1 (epsilon)")
    g.add_argument("--clip_ratio_high", type=float, default=0.2, help="PPO clip above 1 (DAPO clip-higher uses 0.28)")
    g.add_argument("--clip_ratio_c", type=float, default=3.0, help="dual-clip bound for negative advantages (> 1)")
    g.add_argument("--loss_agg_mode", choices=LOSS_AGG_MODES, default="token-mean", help="verl loss aggregation")
    g.add_argument("--scale_rewards", choices=("group", "batch", "none"), default="group",
                   help="GRPO std scaling: group std, batch std, or none (Dr.GRPO)")

    g = p.add_argument_group("output")
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
    g.add_argument("--enable_tensorboard", action="store_true",
                   help="write TensorBoard events (DeepSpeed-Chat's flag: adds tensorboard to --report_to); off")
    g.add_argument("--tensorboard_path", default=None, help="TensorBoard folder; default OUTPUT_DIR/tensorboard")
    g.add_argument("--enable_test_mode", action="store_true", help="stop after --test_stop_step steps (smoke tests)")
    g.add_argument("--test_stop_step", type=int, default=3, help="steps run under --enable_test_mode")
    g.add_argument("--log_completions", type=int, default=2,
                   help="sampled completions per step written to OUTPUT_DIR/completions.jsonl (and TensorBoard text "
                        "with --enable_tensorboard), 0 = none")
    g.add_argument("--no_final_export", action="store_true", help="skip the HF export to OUTPUT_DIR/final")
    g.add_argument("--save_total_limit", type=int, default=2,
                   help="keep the newest N complete checkpoints (0 = all); a save completes before an old one is "
                        "deleted, so the disk holds up to N + 1 while saving")

    g = p.add_argument_group("fault tolerance")
    g.add_argument("--resume", default="auto",
                   help="auto: continue OUTPUT_DIR's latest complete checkpoint when its method-defining flags "
                        "(rl/run/saved_config.py) match, refuse when they differ, exit 0 when it already reached "
                        "--max_steps; force: continue it even with other flags; none: start fresh (replacing its "
                        "checkpoints); or a checkpoints folder / step_N folder")
    g.add_argument("--skip_bad_rows", action="store_true",
                   help="skip malformed data rows (reporting how many) instead of stopping at the first")
    g.add_argument("--max_reward_error_rate", type=float, default=0.5,
                   help="stop (with a checkpoint of the state before the step) when more than this fraction of "
                        "one reward function's own calls in a step fail")
    g.add_argument("--max_bad_steps", type=int, default=3,
                   help="stop after this many consecutive steps with non-finite loss or gradients (each is skipped)")
    return p


def validate(args) -> None:
    """Refuse bad combinations with a message naming the flag; called right after parsing."""
    def bad(msg):
        raise SystemExit(f"train.py: error: {msg}")

    args.reward_funcs = [name.strip() for name in args.reward_funcs.split(",") if name.strip()]
    if not args.reward_funcs:
        bad("--reward_funcs is empty")
    from rewards.policy_rewards import POLICY_REWARDS
    from rewards.registry import CORRECTNESS, build_reward_fn
    for name in args.reward_funcs:
        if name != CORRECTNESS and name not in POLICY_REWARDS:
            try:
                build_reward_fn(name, args)
            except KeyError as exc:
                bad(exc.args[0])
    if len(set(args.reward_funcs)) != len(args.reward_funcs):
        bad(f"--reward_funcs lists a reward twice: {','.join(args.reward_funcs)}")
    short = [name.rpartition(":")[2] for name in args.reward_funcs]  # the metric names: reward/<name>/...
    if len(set(short)) != len(short):
        bad(f"--reward_funcs: two rewards would report under one name ({','.join(short)}); rename a function")
    method = method_class(args.algo)
    if len(args.reward_funcs) < method.min_rewards:
        bad(f"--algo {args.algo} normalises each reward separately and needs at least "
            f"{ {2: 'two', 3: 'three'}.get(method.min_rewards, method.min_rewards)} rewards; "
            f"got --reward_funcs {','.join(args.reward_funcs)} (e.g. --reward_funcs correctness,length)")
    parse_weights(args, "reward_weights", bad)
    validate_open_domain_rewards(args, bad)
    for cls in METHODS.values():  # a method's flags given under another --algo, and its resolved defaults
        cls.check_flags(args, bad)
    if args.code_workers < 1:
        bad(f"--code_workers must be >= 1, got {args.code_workers}")
    if not args.reward_timeout > 0 or args.reward_workers < 1:
        bad(f"--reward_timeout must be > 0 and --reward_workers >= 1, got {args.reward_timeout}, {args.reward_workers}")
    if args.max_turns < 1:
        bad(f"--max_turns must be >= 1, got {args.max_turns}")
    if method.turn_level and args.max_turns < 2:
        bad(f"--algo {args.algo} assigns credit to turns and needs --max_turns >= 2 (got {args.max_turns})")
    if args.max_turns > 1 and args.reward_funcs != [CORRECTNESS]:
        bad("multi-turn episodes (--max_turns > 1) are scored by the env's verifier only; "
            f"drop --reward_funcs {','.join(args.reward_funcs)}")
    if args.num_generations < 2:
        bad(f"--num_generations {args.num_generations}: {args.algo} needs at least 2 responses per prompt")
    method.validate(args, bad)
    for flag in ("per_device_generation_batch_size", "max_answer_seq_len", "max_prompt_seq_len", "max_steps",
                 "ppo_epochs"):
        if getattr(args, flag) < 1:
            bad(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    n = args.per_device_generation_batch_size * args.num_generations
    largest_divisor = max(d for d in range(1, DEFAULT_MAX_MICRO_BATCH + 1) if n % d == 0)
    micro = args.per_device_train_micro_batch_size or largest_divisor
    if micro < 1 or n % micro:
        bad(f"--per_device_train_micro_batch_size {micro} must divide the {n} responses per rank "
            f"(per_device_generation_batch_size x num_generations)")
    args.per_device_train_micro_batch_size = micro
    if args.temperature <= 0:
        bad(f"--temperature must be > 0 for sampled rollouts, got {args.temperature}")
    if not 0 < args.top_p <= 1:
        bad(f"--top_p must be in (0, 1], got {args.top_p}")
    if args.clip_ratio_c <= 1:
        bad(f"--clip_ratio_c must be > 1 (dual clip), got {args.clip_ratio_c}")
    if args.dtype == "auto":  # resolved once here, so the run's config and every rank record the dtype used
        import torch
        from rl.engine.hardware import auto_dtype_name
        args.dtype, why = auto_dtype_name(torch.cuda.is_available())
        if os.environ.get("RANK", "0") == "0":
            print(f"--dtype auto: {args.dtype} ({why})", flush=True)
    if args.dtype == "fp16":
        import torch
        if not torch.cuda.is_available():
            bad("--dtype fp16 needs CUDA (loss-scaled fp16 has no CPU kernels here); use --dtype fp32 or bf16")
    if not 0 <= args.max_reward_error_rate <= 1:
        bad(f"--max_reward_error_rate must be in [0, 1], got {args.max_reward_error_rate}")
    if args.save_strategy == "final" and args.no_final_export:
        bad("--save_strategy final keeps only the final HF export, which --no_final_export turns off: use "
            "--save_strategy no to save nothing")
    if args.max_bad_steps < 1:
        bad(f"--max_bad_steps must be >= 1, got {args.max_bad_steps}")
    if args.save_total_limit < 0 or args.save_steps < 0 or args.save_model_only_steps < 0:
        bad("--save_total_limit, --save_steps and --save_model_only_steps must be >= 0")
    if args.resume not in ("auto", "force", "none") and not os.path.exists(args.resume):
        bad(f"--resume {args.resume} does not exist (use auto, force, none, or a checkpoint folder)")
    if args.beta < 0:
        bad(f"--beta must be >= 0, got {args.beta}")
    if args.log_completions < 0:
        bad(f"--log_completions must be >= 0, got {args.log_completions}")
    from rl.rollout.data_files import check_data_path
    check_data_path(args, bad)
    from envs import env_class_from_flags  # imported here: envs pulls in the verifiers
    env_cls = env_class_from_flags(args, bad)
    args.episode_end_given, args.episode_end = args.episode_end, resolve_episode_end(args.episode_end, method_class(args.algo).fixed_turns)
    check_env_supports(args, env_cls, bad)
    if args.data_path is None and env_cls.dataset("train", 1, args.seed, **env_cls.settings_from_args(args)) is None:
        bad(f"--env {args.env} has no data of its own: pass --data_path")
    if is_local_model_path(args.model_name_or_path):
        args.model_name_or_path = os.path.expanduser(args.model_name_or_path)
    if is_local_model_path(args.model_name_or_path) and not os.path.exists(args.model_name_or_path):
        hint = " (run `bash scripts/setup.sh` to convert the default model)" if args.model_name_or_path == DEFAULT_MODEL_DIR else ""
        bad(f"--model_name_or_path {args.model_name_or_path} does not exist{hint}")
    from rl.log.loggers import validate_loggers
    validate_loggers(args, bad)  # --report_to, --tensorboard_path
    if args.tensorboard_path is None and args.output_dir is not None:  # else set with the default output dir
        args.tensorboard_path = os.path.join(args.output_dir, "tensorboard")
    from rl.engine.zero_config import resolve_zero_stage
    resolve_zero_stage(args)
    if args.offload and args.actor_zero_stage == 0:
        bad("--offload moves ZeRO partitions to the CPU and needs --actor_zero_stage 1, 2 or 3 (got 0)")
    from rl.engine.lora import validate_lora
    from rl.eval.validation import validate_validation
    validate_lora(args, bad)
    validate_validation(args, env_cls, bad)
    from rl.rollout.dapo_flags import validate_dapo
    validate_dapo(args, method, bad)
    validate_rollout_backend(args, bad)


def add_vllm_engine_flags(g) -> None:
    """The vLLM engine's own flags, shared by train.py and eval.py (--rollout_backend vllm)."""
    g.add_argument("--vllm_gpu_memory_utilization", type=float, default=0.3,
                   help="fraction of each GPU vLLM may take for weights and KV cache (TRL's colocate default)")
    g.add_argument("--vllm_max_model_len", type=int, default=0,
                   help="longest context vLLM serves; 0 = prompt + max_turns x answer + 512 feedback tokens per turn")
    g.add_argument("--vllm_cpu_weights", choices=("plain", "packed"), default="packed",
                   help="vLLM-CPU only (default packed: vLLM's repacked oneDNN/AMX weights, repacked after every sync; "
                        "1.28x the tokens/s of plain end to end, sync included: "
                        "benchmarks/results/vllm_cpu_weights.md); plain: torch F.linear on weights the sync updates "
                        "in place (no second copy of the weights)")


def validate_rollout_backend(args, bad) -> None:
    """The GPU rollout flags: refused here, before any model or engine is built."""
    if args.dist_timeout_minutes <= 0:
        bad(f"--dist_timeout_minutes must be > 0, got {args.dist_timeout_minutes}")
    if args.rollout_backend == "hf":
        if args.vllm_is_correction != "none":
            bad("--vllm_is_correction corrects vLLM's sampling log-probs and needs --rollout_backend vllm")
        return
    if not 0 < args.vllm_gpu_memory_utilization < 1:
        bad(f"--vllm_gpu_memory_utilization must be in (0, 1), got {args.vllm_gpu_memory_utilization}")
    if args.vllm_tensor_parallel_size < 1:
        bad(f"--vllm_tensor_parallel_size must be >= 1, got {args.vllm_tensor_parallel_size}")
    if args.vllm_tensor_parallel_size > 1 and args.max_turns > 1:
        bad("--vllm_tensor_parallel_size > 1 needs every rank of a group to generate in lockstep; multi-turn "
            "episodes and TCPO counterfactuals generate a rank-dependent number of times: use 1")
    if args.vllm_is_cap <= 0:
        bad(f"--vllm_is_cap must be > 0, got {args.vllm_is_cap}")
    if args.vllm_max_model_len < 0:
        bad(f"--vllm_max_model_len must be >= 0, got {args.vllm_max_model_len}")
    if args.temperature > 2:
        bad(f"--temperature {args.temperature}: vLLM samples at temperatures up to 2 only (--rollout_backend vllm)")
    need = args.max_prompt_seq_len + args.max_turns * args.max_answer_seq_len  # the model's own tokens alone
    if 0 < args.vllm_max_model_len < need:
        bad(f"--vllm_max_model_len {args.vllm_max_model_len} cannot hold --max_prompt_seq_len {args.max_prompt_seq_len}"
            f" + --max_turns {args.max_turns} x --max_answer_seq_len {args.max_answer_seq_len} = {need} tokens plus "
            "the env's feedback (vLLM refuses a longer context and cuts turns short); raise it, or 0 for the default")
    if args.enable_hybrid_engine:
        bad("--enable_hybrid_engine speeds up generation on the actor; with --rollout_backend vllm vLLM generates: "
            "pick one")
    from rl.rollout.vllm.backend import vllm_unavailable_reason
    reason = vllm_unavailable_reason()
    if reason:
        bad(reason)



def parser_defaults() -> dict:
    """Every flag's default, as a run's saved config compares them (rl/run/start.py)."""
    return vars(build_parser().parse_args([]))


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    validate(args)
    return args
