"""The DeepSpeed side: configs, the ZeRO actor (generates and trains) and the frozen reference.

On CUDA the actor can use DeepSpeed's hybrid engine for generation. Everywhere else generation is
"gather the ZeRO-3 partitions once, detach ZeRO's per-module hooks, HF generate with a KV cache, re-attach":
one all-gather per rollout phase instead of one per layer per token.
"""
import contextlib
import logging
import os
import weakref
from dataclasses import dataclass

import deepspeed
import torch
from deepspeed.accelerator import get_accelerator
from deepspeed.runtime.hybrid_engine import DeepSpeedHybridEngine

from rl.engine.lora import AdaptersOffReference, LoraSettings, lora_param_group, wrap_with_lora
from rl.engine.zero_config import resolve_zero_stage, zero3_parameter_knobs

logger = logging.getLogger(__name__)
# transformers holds only a weak reference to the HfDeepSpeedConfig it reads (`is_deepspeed_zero3_enabled`, which
# `from_pretrained` and `generate` consult): each engine's config is kept alive here for exactly the engine's life,
# without attaching anything to the engine.
_ZERO3_CONFIGS = weakref.WeakKeyDictionary()

# HF model types whose decoder layer has a DeepSpeed 0.19 hybrid-engine inference container
# (deepspeed/module_inject/containers: the HybridEngineContainer subclasses, looked up through
# replace_policy.replace_policies) and whose transformers 5.x model still reads the layer's output as a tuple
# (`hidden_states = outputs[0]`), as DeepSpeed's injected layer returns one (return_tuple=True,
# deepspeed/inference/config.py; model_implementations/transformers/ds_transformer.py). None of these has run here
# (no GPU), and transformers 5.x hands their layers a Cache object where DeepSpeed's layer was written for tuple
# caches: unchecked, they may fail as well. internlm is remote code. qwen2/qwen3/mistral have no container at all.
HYBRID_ENGINE_MODEL_TYPES = ("bloom", "gptj", "gpt_neo", "internlm")
# Containers DeepSpeed 0.19.8 has, for models it cannot serve under transformers 5.x: credo's reading of the two
# sources, refused rather than left to generate garbage.
_TUPLE_FOR_TENSOR = ("transformers 5.x's {model} takes each decoder layer's output as the hidden-state tensor, and "
                     "DeepSpeed's injected layer returns a tuple (return_tuple=True; DeepSpeed 0.19.8 guards only OPT "
                     "against this)")
HYBRID_ENGINE_REFUSED = {
    "llama": _TUPLE_FOR_TENSOR.format(model="LlamaModel") + "; and DS_LLAMAContainer never sets num_kv, so "
             "grouped-query attention (fewer KV heads than query heads) would be computed wrongly",
    "gpt_neox": _TUPLE_FOR_TENSOR.format(model="GPTNeoXModel"),
    "opt": "DeepSpeed 0.19.8 skips its OPT policy for transformers 5.x's Cache-based OPT layer",
}


def context_budget(max_prompt_seq_len: int, max_turns: int, max_answer_seq_len: int) -> int:
    """Longest context a rollout can reach: prompt + every model turn + feedback headroom between turns.

    512 tokens of feedback per turn is our allowance, not a measured bound; raise --vllm_max_model_len if an env's
    feedback is longer.
    """
    return max_prompt_seq_len + max_turns * max_answer_seq_len + (max_turns - 1) * 512


def on_cuda() -> bool:
    return get_accelerator().device_name() == "cuda"


def hybrid_engine_supported(model_type: str, rope_scaling=None) -> tuple:
    """(True, "") when DeepSpeed's hybrid engine can generate for this architecture, else (False, why).

    A scaled rotary embedding (e.g. Llama 3.1's rope_type "llama3", which DeepSeek-R1-Distill-Llama-8B uses) is
    refused: the injected kernel builds its rotary table from rope_theta alone (DeepSpeed 0.19.8 raises on it).
    """
    if model_type in HYBRID_ENGINE_REFUSED:
        return False, f"the DeepSpeed hybrid engine cannot generate for model type {model_type!r}: " \
                      f"{HYBRID_ENGINE_REFUSED[model_type]}"
    if model_type not in HYBRID_ENGINE_MODEL_TYPES:
        return False, (f"DeepSpeed has no hybrid-engine inference container for model type {model_type!r} "
                       f"(supported: {', '.join(HYBRID_ENGINE_MODEL_TYPES)})")
    rope_type = None
    if isinstance(rope_scaling, dict):
        rope_type = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if rope_type not in (None, "default"):
        return False, f"DeepSpeed's inference kernels cannot apply rope_type {rope_type!r} (model type {model_type})"
    return True, ""


@dataclass(frozen=True)
class EngineSettings:
    """The flags the actor and reference engines read: optimisation and system (names as on the command line,
    where they differ in the comment). Validated at parse time (rl/config.py, rl/engine/lora.py)."""
    model_name_or_path: str
    dtype: str                     # fp32 / bf16 / fp16 / auto
    zero_stage: int                # --actor_zero_stage
    offload: bool
    learning_rate: float           # --actor_learning_rate
    weight_decay: float            # --actor_weight_decay
    lr_scheduler_type: str
    num_warmup_steps: int
    ppo_epochs: int                # optimizer steps per rollout batch (--ppo_epochs x mini-batches): the LR schedule
                                   # spans max_steps * ppo_epochs
    gradient_clipping: float
    micro: int                     # --per_device_train_micro_batch_size
    responses_per_rank: int        # one optimizer step's responses per rank (a mini-batch's; the whole rollout's
                                   # --per_device_generation_batch_size * --num_generations without mini-batches)
    gradient_checkpointing: bool
    lora: LoraSettings
    hybrid_engine: bool            # --enable_hybrid_engine (falls back to gathered HF generate where unsupported)
    max_out_tokens: int            # the hybrid engine's: the longest rollout context (context_budget)
    uses_reference: bool           # --beta != 0, or a method that reads the reference (rl/config.py records it)

    @classmethod
    def from_args(cls, args, mini_batches: int = 1) -> "EngineSettings":
        """mini_batches: optimizer steps per pass over a rollout batch (rl.update.ppo.mini_batch_count, which the
        trainer computes: this room sits below the update). The engine then accumulates one mini-batch's
        micro-batches per step, and its LR schedule counts every optimizer step."""
        return cls(model_name_or_path=args.model_name_or_path, dtype=args.dtype, zero_stage=args.actor_zero_stage,
                   offload=bool(args.offload), learning_rate=args.actor_learning_rate,
                   weight_decay=args.actor_weight_decay, lr_scheduler_type=args.lr_scheduler_type,
                   num_warmup_steps=args.num_warmup_steps, ppo_epochs=args.ppo_epochs * mini_batches,
                   gradient_clipping=args.gradient_clipping, micro=args.per_device_train_micro_batch_size,
                   responses_per_rank=args.per_device_generation_batch_size * args.num_generations // mini_batches,
                   gradient_checkpointing=bool(getattr(args, "gradient_checkpointing", False)),
                   lora=LoraSettings.from_args(args), hybrid_engine=bool(args.enable_hybrid_engine),
                   max_out_tokens=context_budget(args.max_prompt_seq_len, args.max_turns, args.max_answer_seq_len),
                   uses_reference=bool(getattr(args, "uses_reference", args.beta != 0)))


def hybrid_engine_config(settings: EngineSettings) -> dict:
    """DeepSpeed-Chat's hybrid_engine block (its get_train_ds_config defaults; max_out_tokens covers every turn)."""
    return {"enabled": True, "max_out_tokens": settings.max_out_tokens, "inference_tp_size": 1,
            "release_inference_cache": False, "pin_parameters": True, "tp_gather_partition_size": 8}


def resolve_dtype(name: str) -> torch.dtype:
    if name == "auto":
        from rl.engine.hardware import auto_dtype_name
        name, _ = auto_dtype_name(on_cuda())
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def ds_config(settings: EngineSettings, world_size: int, dtype: torch.dtype, train: bool = True) -> dict:
    """DeepSpeed config for the actor (train=True) or the frozen reference (train=False).

    The global batch of one optimizer step is the whole rollout batch: per-rank responses split into
    micro-batches with gradient accumulation.
    """
    responses_per_rank = settings.responses_per_rank
    micro = settings.micro
    zero = {"stage": settings.zero_stage}
    if settings.zero_stage == 3:
        # one rank keeps every parameter gathered between optimizer steps (rl/engine/zero_config.py)
        zero.update({**zero3_parameter_knobs(world_size), "stage3_gather_16bit_weights_on_model_save": False})
    if settings.offload:
        zero["offload_param"] = {"device": "cpu"} if settings.zero_stage == 3 else None
        zero["offload_optimizer"] = {"device": "cpu"}
        zero = {k: v for k, v in zero.items() if v is not None}
    cfg = {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": responses_per_rank // micro,
        "train_batch_size": responses_per_rank * world_size,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == torch.bfloat16},
        "fp16": {"enabled": dtype == torch.float16},
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
    }
    if train:
        cfg["gradient_clipping"] = settings.gradient_clipping
        cfg["optimizer"] = {"type": "AdamW", "params": {
            "lr": settings.learning_rate, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": settings.weight_decay,
            # torch's AdamW needs no compiled op; ZeRO-Offload needs DeepSpeedCPUAdam (built on first use).
            "torch_adam": not settings.offload}}
        if not settings.offload:
            # torch's fused AdamW kernel (CPU and CUDA; transformers' default optim, adamw_torch_fused): on a CPU
            # torch otherwise runs its per-parameter loop, 0.30 s a step for SmolLM2-135M on 2 cores against 0.07 s
            # (benchmarks/results/optimizer_step.md); the same update to float rounding
            cfg["optimizer"]["params"]["fused"] = True
    else:
        cfg["zero_optimization"].pop("offload_optimizer", None)
    return cfg


def _param_groups(model, weight_decay: float):
    """No weight decay on biases and norms (DeepSpeed-Chat's grouping)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.dim() < 2 or "norm" in name.lower() or name.endswith(".bias") else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _load_model(path: str, cfg: dict, dtype: torch.dtype):
    # Import the model class before any zero.Init: a first import of a transformers model module inside it breaks
    # the torch._dynamo import (transformers 5.x, DeepSpeed 0.19).
    from transformers import AutoModelForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    # Kept alive while from_pretrained runs so that transformers loads ZeRO-3 partitions directly.
    hf_ds_config = HfDeepSpeedConfig(cfg) if cfg["zero_optimization"]["stage"] == 3 else None
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, hf_ds_config


def build_actor(settings: EngineSettings, world_size: int, num_training_steps: int):
    """The trainable actor: a DeepSpeed engine holding model, optimizer and LR schedule.

    num_training_steps: the run's --max_steps (the LR schedule's span, times ppo_epochs)."""
    from transformers import get_scheduler

    dtype = resolve_dtype(settings.dtype)
    cfg = ds_config(settings, world_size, dtype, train=True)
    if settings.hybrid_engine:
        fallback = _hybrid_engine_fallback_reason(settings.model_name_or_path)
        if fallback is None:
            cfg["hybrid_engine"] = hybrid_engine_config(settings)
        else:
            logger.warning("--enable_hybrid_engine: %s; this run generates by gathering ZeRO-3 parameters and calling "
                           "HF generate instead", fallback)
    model, hf_ds_config = _load_model(settings.model_name_or_path, cfg, dtype)
    model.config.use_cache = True  # generation uses the KV cache; training forwards pass use_cache=False
    # --gradient_checkpointing, --lora_r (peft adapters, base frozen)
    model = prepare_actor_model(model, settings.gradient_checkpointing, settings.lora)

    def scheduler(optimizer):
        return get_scheduler(settings.lr_scheduler_type, optimizer=optimizer,
                             num_warmup_steps=settings.num_warmup_steps,
                             num_training_steps=num_training_steps * settings.ppo_epochs)

    engine, *_ = deepspeed.initialize(model=model, config=cfg, lr_scheduler=scheduler,
                                      model_parameters=lora_param_group(_param_groups(model, settings.weight_decay),
                                                                        model, settings.lora, settings.weight_decay))
    _keep_zero3_config(engine, hf_ds_config)
    return engine


def _hybrid_engine_fallback_reason(model_path: str):
    """None when the hybrid engine can be used here, else the one-line reason for the fallback."""
    if not on_cuda():
        return f"the DeepSpeed hybrid engine needs CUDA (this run: {get_accelerator().device_name()})"
    from transformers import AutoConfig
    return hybrid_engine_refusal(AutoConfig.from_pretrained(model_path))


def hybrid_engine_refusal(config):
    """None when the hybrid engine can generate for this HF config (on CUDA), else the one-line reason."""
    rope = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None)
    ok, why = hybrid_engine_supported(config.model_type, rope if isinstance(rope, dict) else None)
    return None if ok else why


def build_reference(settings: EngineSettings, world_size: int, actor=None):
    """The frozen reference, partitioned like the actor. None when nothing uses it (beta = 0 and no MAESTRO KL in
    the reward). With --lora_r (and the base frozen), the actor with its adapters disabled (rl/engine/lora.py): no copy."""
    if not settings.uses_reference:
        return None
    if settings.lora.reference_is_base:
        return AdaptersOffReference(actor)
    dtype = resolve_dtype(settings.dtype)
    cfg = ds_config(settings, world_size, dtype, train=False)
    model, hf_ds_config = _load_model(settings.model_name_or_path, cfg, dtype)
    model.requires_grad_(False)
    model.eval()
    engine, *_ = deepspeed.initialize(model=model, config=cfg)
    _keep_zero3_config(engine, hf_ds_config)
    return engine


def _keep_zero3_config(engine, hf_ds_config) -> None:
    if hf_ds_config is not None:
        _ZERO3_CONFIGS[engine] = hf_ds_config


def hybrid_engine_active(engine) -> bool:
    """Whether DeepSpeed built its hybrid engine for this actor (`--enable_hybrid_engine` on CUDA, for a supported
    architecture; otherwise build_actor fell back to a plain engine)."""
    return isinstance(engine, DeepSpeedHybridEngine)


def _zero3_offload_coordinator(engine):
    optimizer = getattr(engine, "optimizer", None)
    if optimizer is None:
        return None
    return getattr(optimizer, "parameter_offload", optimizer)


@contextlib.contextmanager
def generation_model(engine):
    """Yield a module that generates with full weights; restores ZeRO-3 partitioning and hooks on exit.

    ZeRO-3: all partitions are gathered once, and ZeRO's per-module fetch/release hooks are detached for the
    duration (as TRL does), so that generating T tokens does not re-gather every layer T times.
    """
    module = getattr(engine, "module", engine)  # a plain nn.Module (eval, tests) generates as it is
    if module is not engine and engine.zero_optimization_partition_weights():
        coordinator = _zero3_offload_coordinator(engine)
        with deepspeed.zero.GatheredParameters(list(module.parameters())):
            for param in module.parameters():
                param.ds_active_sub_modules.clear()
            for hook in coordinator.forward_hooks + coordinator.backward_hooks:
                hook.remove()
            coordinator.forward_hooks, coordinator.backward_hooks = [], []
            try:
                yield module
            finally:
                coordinator._register_deepspeed_module(coordinator.module, count=[0])
    else:
        yield module


@contextlib.contextmanager
def hybrid_engine_inference(engine: DeepSpeedHybridEngine):
    """Yield the module whose `generate` runs DeepSpeed's inference kernels.

    DeepSpeed-Chat's protocol: engine.eval() swaps the inference kernels in (module.generate is already the hybrid
    engine's), engine.train() swaps the training forwards back.
    """
    was_training = engine.training
    engine.eval()
    try:
        yield engine.module
    finally:
        engine.train()
        if not was_training:
            torch.nn.Module.train(engine, False)


def set_cpu_threads():
    """One rank per core by default: OMP threads = cores / local ranks (the launcher sets LOCAL_SIZE)."""
    if on_cuda() or "OMP_NUM_THREADS" in os.environ:
        return
    local_ranks = int(os.environ.get("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_ranks)))


# --- the actor's model before DeepSpeed wraps it ---
# What the actor's HF model gets before DeepSpeed wraps it: gradient checkpointing (--gradient_checkpointing) and
# LoRA adapters (--lora_r, rl/engine/lora.py).

def enable_gradient_checkpointing(model):
    """transformers' activation checkpointing per decoder layer, non-reentrant (torch's recommended mode; TRL's
    default): the layer's activations are recomputed in backward instead of kept, and frozen inputs (LoRA's base,
    embeddings) need no `enable_input_require_grads` workaround as the reentrant mode does."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def prepare_actor_model(model, gradient_checkpointing: bool, lora: LoraSettings):
    """The actor's model as DeepSpeed should see it. Checkpointing is switched on the plain HF model (peft forwards
    the call, but the base model is where transformers keeps it); LoRA then freezes the base weights."""
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return wrap_with_lora(model, lora)


def add_engine_flags(p):
    """The engine's flags: the optimiser and DeepSpeed's system knobs."""
    g = p.add_argument_group("engine: optimiser and DeepSpeed")
    g.add_argument("--actor_learning_rate", type=float, default=2e-5, help="AdamW learning rate")
    g.add_argument("--actor_weight_decay", type=float, default=0.0, help="AdamW weight decay")
    g.add_argument("--lr_scheduler_type", choices=("constant", "linear", "cosine"), default="constant",
                   help="schedule after warmup")
    g.add_argument("--num_warmup_steps", type=int, default=0, help="linear warmup steps")
    g.add_argument("--gradient_clipping", type=float, default=1.0, help="global grad-norm clip (0 = off)")
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
    g.add_argument("--dist_timeout_minutes", type=float, default=30.0,
                   help="timeout of every collective of DeepSpeed's process group (and of the groups in which "
                        "credo shares prompts between tensor-parallel ranks); vLLM builds its own tensor-parallel "
                        "groups, which keep vLLM's timeouts")


def validate_engine(args, bad):
    """--dtype auto is resolved here, once, so the run's config and every rank record the dtype used; then the
    ZeRO stage (rl/engine/zero_config.py) and what it allows."""
    if args.dtype == "auto":
        from rl.engine.hardware import auto_dtype_name
        args.dtype, why = auto_dtype_name(torch.cuda.is_available())
        if os.environ.get("RANK", "0") == "0":
            print(f"--dtype auto: {args.dtype} ({why})", flush=True)
    if args.dtype == "fp16" and not torch.cuda.is_available():
        bad("--dtype fp16 needs CUDA (loss-scaled fp16 has no CPU kernels here); use --dtype fp32 or bf16")
    if args.dist_timeout_minutes <= 0:
        bad(f"--dist_timeout_minutes must be > 0, got {args.dist_timeout_minutes}")
    resolve_zero_stage(args)
    if args.offload and args.actor_zero_stage == 0:
        bad("--offload moves ZeRO partitions to the CPU and needs --actor_zero_stage 1, 2 or 3 (got 0)")
