"""What the actor's HF model gets before DeepSpeed wraps it: gradient checkpointing (--gradient_checkpointing) and
LoRA adapters (--lora_r, rl/engine/lora.py)."""
from rl.engine.lora import LoraSettings, wrap_with_lora


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
