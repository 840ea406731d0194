"""LoRA through peft: the flags, wrapping the actor before DeepSpeed, the adapter-free reference, the merged export.

Names follow TRL's ModelConfig and OpenRLHF (`lora_r`, `lora_alpha`, `lora_dropout`, `lora_target_modules`); 0 = off.
DeepSpeed-Chat's names are aliases of the same flags (`--actor_lora_dim`, `--actor_lora_module_name`), and its
`--only_optimize_lora` / `--actor_lora_learning_rate` are here too (see add_lora_flags for the defaults).
As in TRL's GRPOTrainer, the frozen reference of a LoRA run is the actor itself with its adapters switched off
(`PeftModel.disable_adapter`): no second copy of the base weights, at any ZeRO stage (the base weights are frozen
and partitioned with the actor's; only the adapters have gradients and Adam state). With --no_only_optimize_lora
the base weights train too, so the reference is a frozen copy of the initial model, as without LoRA.
"""
from dataclasses import dataclass

import torch

LORA_DEFAULT_TARGETS = "all-linear"  # peft's keyword: every nn.Linear but the output head (OpenRLHF's default)


def add_lora_flags(p):
    g = p.add_argument_group("LoRA (peft adapters on the actor; the reference is the base with adapters off)")
    g.add_argument("--lora_r", "--actor_lora_dim", type=int, default=0,
                   help="LoRA rank (TRL/OpenRLHF's lora_r, DeepSpeed-Chat's actor_lora_dim); 0 = off, full fine-tuning")
    g.add_argument("--lora_alpha", "--actor_lora_alpha", type=float, default=16.0,
                   help="LoRA scaling numerator: the update is (alpha / r) B A (OpenRLHF's default 16)")
    g.add_argument("--lora_dropout", type=float, default=0.0, help="dropout on the LoRA input (OpenRLHF's default 0)")
    g.add_argument("--lora_target_modules", "--actor_lora_module_name", default=LORA_DEFAULT_TARGETS,
                   help="comma list of module names to adapt (e.g. q_proj,k_proj,v_proj,o_proj), or all-linear "
                        "(peft: every linear layer but the output head); default all-linear. Names as peft matches "
                        "them (a module name's last parts), not DeepSpeed-Chat's substring scope (decoder.layers.)")
    # credo's reading: DeepSpeed-Chat's --only_optimize_lora is a store_true flag, off by default, so its LoRA runs
    # train the base weights as well unless asked not to (its own launch scripts pass the flag). Here the default is
    # on: peft, TRL, OpenRLHF and verl all train the adapters only, credo's LoRA did so before these flags existed,
    # and only then is the LoRA memory saving real and the reference the actor with its adapters off.
    g.add_argument("--only_optimize_lora", dest="only_optimize_lora", action="store_true", default=True,
                   help="train the LoRA adapters only, base weights frozen (DeepSpeed-Chat's flag); the default")
    g.add_argument("--no_only_optimize_lora", dest="only_optimize_lora", action="store_false",
                   help="with --lora_r: train the base weights as well as the adapters (DeepSpeed-Chat without "
                        "--only_optimize_lora); the reference is then a frozen copy of the initial model")
    g.add_argument("--actor_lora_learning_rate", type=float, default=None,
                   help="learning rate of the adapter weights, their own optimizer param group (DeepSpeed-Chat's "
                        "flag; its default 5e-4); default: --actor_learning_rate")


def validate_lora(args, bad):
    """Parse-time checks of the LoRA flags and of what cannot run with adapters."""
    if args.lora_r < 0:
        bad(f"--lora_r must be >= 0 (0 = off), got {args.lora_r}")
    if args.actor_lora_learning_rate is not None and not args.actor_lora_learning_rate > 0:
        bad(f"--actor_lora_learning_rate must be > 0, got {args.actor_lora_learning_rate}")
    if not args.lora_r:
        for flag, unused in (("--actor_lora_learning_rate", args.actor_lora_learning_rate is not None),
                             ("--no_only_optimize_lora", not args.only_optimize_lora)):
            if unused:
                bad(f"{flag} without --lora_r (or --actor_lora_dim) > 0: there are no adapters; add --lora_r R")
        return
    if args.lora_alpha <= 0:
        bad(f"--lora_alpha must be > 0, got {args.lora_alpha}")
    if not 0 <= args.lora_dropout < 1:
        bad(f"--lora_dropout must be in [0, 1), got {args.lora_dropout}")
    targets = lora_targets(args.lora_target_modules)
    if not targets:
        bad("--lora_target_modules is empty (use all-linear, or a comma list of module names)")
    if args.rollout_backend == "vllm":
        # rl/rollout/vllm/backend.py skips `lora_` names and sends the base weights: vLLM would sample from the base model.
        bad("--lora_r > 0 with --rollout_backend vllm: the vLLM weight sync sends base weights only (adapters are not "
            "merged before it), so vLLM would sample from the untrained model; use --rollout_backend hf")
    if args.enable_hybrid_engine:
        bad("--lora_r > 0 with --enable_hybrid_engine: DeepSpeed's inference containers replace the decoder layers "
            "and know nothing of peft's LoRA layers; drop one of them")
    try:
        import peft  # noqa: F401
    except ImportError:
        bad("--lora_r > 0 needs peft: pip install -r requirements.txt")


def lora_targets(value: str):
    """--lora_target_modules as peft takes it: the string "all-linear", or a list of module names."""
    names = [n.strip() for n in value.split(",") if n.strip()]
    return LORA_DEFAULT_TARGETS if names == [LORA_DEFAULT_TARGETS] else names


@dataclass(frozen=True)
class LoraSettings:
    """The LoRA flags (validated at parse time by validate_lora); r = 0 is off."""
    r: int                  # --lora_r
    alpha: float            # --lora_alpha
    dropout: float          # --lora_dropout
    target_modules: str     # --lora_target_modules, as given (comma list or all-linear)
    only_optimize: bool = True     # --only_optimize_lora (False: the base weights train as well)
    learning_rate: float = None    # --actor_lora_learning_rate; None: the actor's learning rate

    @classmethod
    def from_args(cls, args) -> "LoraSettings":
        return cls(r=args.lora_r, alpha=args.lora_alpha, dropout=args.lora_dropout,
                   target_modules=args.lora_target_modules, only_optimize=args.only_optimize_lora,
                   learning_rate=args.actor_lora_learning_rate)

    @property
    def reference_is_base(self) -> bool:
        """Whether the actor with its adapters off is the frozen initial model (only the adapters train)."""
        return bool(self.r) and self.only_optimize


def wrap_with_lora(model, settings: LoraSettings):
    """The model with LoRA adapters (peft), or the model itself with --lora_r 0. Call before deepspeed.initialize:
    the base weights are frozen here, so DeepSpeed builds optimizer state for the adapters only."""
    if not settings.r:
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=lora_targets(settings.target_modules), bias="none", task_type="CAUSAL_LM")
    try:
        model = get_peft_model(model, config)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        raise SystemExit(f"train.py: error: --lora_target_modules {settings.target_modules}: {exc}") from None
    if not settings.only_optimize:  # DeepSpeed-Chat without --only_optimize_lora: everything trains
        model.requires_grad_(True)
        # peft keeps adapters in fp32 over a bf16/fp16 base (autocast_adapter_dtype); with the base weights in the
        # optimizer too, ZeRO-3 flattens one buffer of all trainable weights and asserts a single dtype
        # (deepspeed/runtime/zero/utils.py defragment). DeepSpeed's bf16/fp16 optimizer keeps fp32 master copies
        # anyway, so the adapters take the base dtype here.
        base_dtype = next(p.dtype for n, p in model.named_parameters() if not is_lora_param(n))
        for name, param in model.named_parameters():
            if is_lora_param(name):
                param.data = param.data.to(base_dtype)
    return model


def base_is_frozen(module) -> bool:
    """Whether only the adapters of this PeftModel train (--only_optimize_lora, the default)."""
    return not any(p.requires_grad for n, p in module.named_parameters() if not is_lora_param(n))


def is_lora_param(name: str) -> bool:
    return ".lora_A." in name or ".lora_B." in name


def lora_param_group(groups: list, model, settings: LoraSettings, weight_decay: float) -> list:
    """The optimizer's param groups with the adapter weights moved into a group of their own, whose lr is
    --actor_lora_learning_rate (DeepSpeed-Chat's get_optimizer_grouped_parameters; adapters get the weight decay
    as there). Without LoRA the groups as given. The group exists in every LoRA run, whatever the lr, so a run's
    optimizer state has the same groups as its checkpoints. Pure on the groups' lists."""
    if not settings.r:
        return groups
    adapters = [p for n, p in model.named_parameters() if p.requires_grad and is_lora_param(n)]
    ids = {id(p) for p in adapters}
    rest = [{**g, "params": [p for p in g["params"] if id(p) not in ids]} for g in groups]
    group = {"params": adapters, "weight_decay": weight_decay}
    if settings.learning_rate is not None:
        group["lr"] = settings.learning_rate
    return rest + [group]


def is_lora(module) -> bool:
    return hasattr(module, "disable_adapter") and hasattr(module, "peft_config")


class AdaptersOffReference:
    """The frozen reference of a LoRA run: the actor's forward with its adapters disabled (TRL's ref_model = None).

    Called like a model (`reference(input_ids=..., ...)`); the forwards go through the actor's DeepSpeed engine,
    so under ZeRO-3 they gather the same partitions as the actor's own and every rank makes the same calls.
    """

    def __init__(self, actor):
        self.actor = actor

    @property
    def device(self):
        return self.actor.device

    def __call__(self, *args, **kwargs):
        with self.actor.module.disable_adapter():
            return self.actor(*args, **kwargs)


# --- export -------------------------------------------------------------------------------------------------

def _base_name(peft_name: str) -> str:
    """A PeftModel parameter name as the plain model names it: base_model.model.X.base_layer.weight -> X.weight."""
    name = peft_name[len("base_model.model."):] if peft_name.startswith("base_model.model.") else peft_name
    return name.replace(".base_layer.", ".")


def merged_state_dict(module, state: dict) -> dict:
    """The plain model's state dict with every LoRA update merged in: W + peft's own delta (scaling x B A). Collective.

    state: the PeftModel's full state gathered on rank 0 (rl.run.checkpoint.gathered_state_dict); elsewhere {}.
    Returns, on rank 0, {plain name: tensor} without adapter weights; {} on the other ranks. The module itself is
    not modified (peft's merge_adapter would change the live weights and unmerging is not exact in floating point).
    """
    import deepspeed
    from peft.tuners.lora import LoraLayer

    from rl.engine import dist
    merged = {}
    if dist.rank() == 0:
        merged = {_base_name(k): v for k, v in state.items() if ".lora_" not in k}
    for name, layer in module.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        adapters = [a for a in layer.active_adapters if a in layer.lora_A]
        params = [p for a in adapters for p in (*layer.lora_A[a].parameters(), *layer.lora_B[a].parameters())]
        with deepspeed.zero.GatheredParameters(params):  # collective; a no-op below ZeRO-3
            if dist.rank() == 0:
                key = _base_name(f"{name}.base_layer.weight")
                weight = merged[key]
                for adapter in adapters:
                    delta = layer.get_delta_weight(adapter).detach().to("cpu", torch.float32)
                    weight = (weight.float() + delta).to(weight.dtype)
                merged[key] = weight
    return merged


def save_adapter(module, state: dict, out_dir: str):
    """The adapter alone (adapter_config.json + adapter_model.safetensors), for PeftModel.from_pretrained(base, dir).
    Rank 0 only; `state` is the gathered PeftModel state."""
    module.save_pretrained(out_dir, state_dict=state, safe_serialization=True)
