"""Checkpoints: DeepSpeed engine state + trainer state + per-rank RNG; and the final HF export.

Layout: OUTPUT_DIR/checkpoints/step_N/ (complete checkpoints only) and OUTPUT_DIR/checkpoints/latest (a one-line
file naming the newest complete one). A save writes into `.tmp-step_N`, renames it to `step_N` once every rank's
files are in, and only then moves `latest` (write-to-temp + os.replace): a kill at any moment leaves `latest`
naming a complete checkpoint, and a resume never sees a partial one.
"""
import os
import random
import re
import shutil
import signal

import deepspeed
import numpy as np
import torch

from rl import dist

CHECKPOINT_SUBDIR = "checkpoints"
# Fault injection for the crash-safety test: SIGKILL every rank after its files are written, before the rename.
FAULT_KILL_IN_SAVE_ENV = "CREDO_FAULT_KILL_IN_SAVE_AT_STEP"
_TAG = re.compile(r"^step_(\d+)$")


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def checkpoint_root(output_dir: str) -> str:
    return os.path.join(output_dir, CHECKPOINT_SUBDIR)


def complete_checkpoints(root: str) -> list:
    """Tags of complete checkpoints under root, oldest first."""
    if not os.path.isdir(root):
        return []
    tags = [name for name in os.listdir(root) if _TAG.match(name) and os.path.isdir(os.path.join(root, name))]
    return sorted(tags, key=lambda t: int(_TAG.match(t).group(1)))


def latest_checkpoint(root: str):
    """The tag `latest` names, or None. `latest` is only ever written after its checkpoint is complete."""
    path = os.path.join(root, "latest")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        tag = f.read().strip()
    return tag if os.path.isdir(os.path.join(root, tag)) else None


def _write_latest(root: str, tag: str):
    tmp = os.path.join(root, "latest.tmp")
    with open(tmp, "w") as f:
        f.write(tag + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(root, "latest"))


def save_checkpoint(engine, output_dir: str, step: int, trainer_state: dict, save_total_limit: int = 0) -> str:
    """Save OUTPUT_DIR/checkpoints/step_N atomically. Collective: every rank calls it."""
    root = checkpoint_root(output_dir)
    tag, tmp_tag = f"step_{step}", f".tmp-step_{step}"
    if dist.rank() == 0:
        shutil.rmtree(os.path.join(root, tmp_tag), ignore_errors=True)  # debris of a save that was killed
        os.makedirs(os.path.join(root, tmp_tag))
    dist.barrier()
    torch.save(rng_state(), os.path.join(root, tmp_tag, f"rng_rank{dist.rank()}.pt"))
    engine.save_checkpoint(root, tag=tmp_tag, client_state={"trainer_state": trainer_state}, save_latest=False)
    dist.barrier()
    if os.environ.get(FAULT_KILL_IN_SAVE_ENV) == str(step):
        os.kill(os.getpid(), signal.SIGKILL)
    if dist.rank() == 0:
        final = os.path.join(root, tag)
        if os.path.exists(final):  # re-saving the same step (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.rename(os.path.join(root, tmp_tag), final)
        _write_latest(root, tag)
        if save_total_limit > 0:
            for old in complete_checkpoints(root)[:-save_total_limit]:
                shutil.rmtree(os.path.join(root, old), ignore_errors=True)
    dist.barrier()
    return os.path.join(root, tag)


def resolve_resume(resume: str, output_dir: str):
    """(root, tag) to load for --resume auto|none|PATH, or None to start fresh.

    PATH may be a checkpoints folder (its `latest` is used) or one step_N folder inside it.
    """
    if resume == "none":
        return None
    if resume == "auto":
        root = checkpoint_root(output_dir)
        tag = latest_checkpoint(root)
        return (root, tag) if tag else None
    path = os.path.abspath(resume.rstrip("/"))
    if _TAG.match(os.path.basename(path)) and os.path.isdir(path):
        return os.path.dirname(path), os.path.basename(path)
    tag = latest_checkpoint(path)
    if tag is None:
        raise FileNotFoundError(f"--resume {resume}: no complete checkpoint there (expected a step_N folder, or a "
                                f"checkpoints folder with a `latest` file)")
    return path, tag


def load_checkpoint(engine, root: str, tag: str) -> dict:
    """Restore engine (model, optimizer, scheduler) and this rank's RNG; return the trainer state."""
    path, client_state = engine.load_checkpoint(root, tag=tag, load_optimizer_states=True,
                                                load_lr_scheduler_states=True)
    if path is None:
        raise FileNotFoundError(f"DeepSpeed could not load checkpoint {tag} under {root}")
    rng_file = os.path.join(root, tag, f"rng_rank{dist.rank()}.pt")
    if not os.path.exists(rng_file):
        raise FileNotFoundError(f"{rng_file} is missing: the checkpoint was written by a run with another rank count")
    set_rng_state(torch.load(rng_file, weights_only=False))
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
