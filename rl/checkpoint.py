"""Checkpoints: DeepSpeed engine state + trainer state + per-rank RNG; and the final HF export."""
import os
import random
import shutil

import deepspeed
import numpy as np
import torch

from rl import dist

CHECKPOINT_SUBDIR = "checkpoints"


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def save_checkpoint(engine, output_dir: str, step: int, trainer_state: dict) -> str:
    """Save under OUTPUT_DIR/checkpoints/step_N. Collective: every rank calls it.

    Per-rank RNG files are written before DeepSpeed's own files, and DeepSpeed moves its `latest` pointer only
    after its files are complete, so `latest` never names a checkpoint without its RNG state.
    """
    root = os.path.join(output_dir, CHECKPOINT_SUBDIR)
    tag = f"step_{step}"
    os.makedirs(os.path.join(root, tag), exist_ok=True)
    torch.save(rng_state(), os.path.join(root, tag, f"rng_rank{dist.rank()}.pt"))
    dist.barrier()
    engine.save_checkpoint(root, tag=tag, client_state={"trainer_state": trainer_state})
    dist.barrier()
    return os.path.join(root, tag)


def load_checkpoint(engine, checkpoint_root: str, tag: str = None) -> dict:
    """Restore engine (model, optimizer, scheduler) and this rank's RNG; return the trainer state."""
    path, client_state = engine.load_checkpoint(checkpoint_root, tag=tag)
    if path is None:
        raise FileNotFoundError(f"no DeepSpeed checkpoint under {checkpoint_root}")
    set_rng_state(torch.load(os.path.join(path, f"rng_rank{dist.rank()}.pt"), weights_only=False))
    return client_state["trainer_state"]


def gathered_state_dict(module) -> dict:
    """Full parameters (and persistent buffers) on rank 0, gathered one tensor at a time. Collective."""
    state = {}
    for name, param in module.named_parameters():
        with deepspeed.zero.GatheredParameters([param]):  # a no-op for parameters that are not partitioned
            if dist.rank() == 0:
                state[name] = param.detach().to("cpu", copy=True)
    if dist.rank() == 0:
        for mod_name, mod in module.named_modules():
            for buf_name, buf in mod.named_buffers(recurse=False):
                if buf is not None and buf_name not in mod._non_persistent_buffers_set:  # e.g. rotary inv_freq
                    state[f"{mod_name}.{buf_name}" if mod_name else buf_name] = buf.detach().to("cpu", copy=True)
    return state


def export_hf(engine, tokenizer, out_dir: str):
    """Write an HF folder (safetensors, config, tokenizer, chat template) loadable by from_pretrained. Collective.

    Written to a temporary sibling and renamed, so a crash mid-export never leaves a half-written `final`.
    """
    state = gathered_state_dict(engine.module)
    if dist.rank() == 0:
        tmp = out_dir.rstrip("/") + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        engine.module.save_pretrained(tmp, state_dict=state, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(out_dir, ignore_errors=True)
        os.rename(tmp, out_dir)
    dist.barrier()
