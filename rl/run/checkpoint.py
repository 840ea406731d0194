"""Checkpoints: DeepSpeed engine state + trainer state + per-rank RNG; and the final HF export.

Layout: OUTPUT_DIR/checkpoints/step_N/ and OUTPUT_DIR/checkpoints/latest (a one-line file naming the newest
complete one). A save writes into `.tmp-step_N`, adds `manifest.json` (every file's size and sha256, rl/run/manifest.py)
once every rank's files are in, renames the folder to `step_N`, and only then moves `latest` (write-to-temp +
os.replace). So a step folder with a manifest is complete, a kill at any moment leaves the previous checkpoint
intact, a failed save (full disk) names the file and errno and removes its partial folder, and a load checks every
file against the manifest and refuses non-finite weights before training on them.
"""
import contextlib
import logging
import os
import random
import re
import shutil
from dataclasses import dataclass

import deepspeed
import numpy as np
import torch

from rl.engine import dist
from rl.engine.lora import base_is_frozen, is_lora, merged_state_dict, save_adapter
from rl.engine.models import save_tokenizer
from rl.run.manifest import (MANIFEST_NAME, CheckpointError, FileWriteError, checkpoint_files, describe_failure,
                             file_entries, fsync_dir, read_manifest, route_writes_through_python, save_durably,
                             verify_checkpoint, write_manifest)
from rl.run.reshard import announce, load_universal, reseed, saved_world_size

logger = logging.getLogger(__name__)
CHECKPOINT_SUBDIR = "checkpoints"
_TAG = re.compile(r"^step_(\d+)$")


def rng_state() -> dict:
    """Every generator the run samples from. On a GPU the decode loop and HF generate draw from this rank's CUDA
    generator, so it is kept too (before, resume and validation restored the CPU stream only)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # the current device's: one rank, one GPU
    return state


def set_rng_state(state: dict):
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():  # a CPU run's checkpoint has none
        torch.cuda.set_rng_state(state["cuda"])


def checkpoint_root(output_dir: str) -> str:
    return os.path.join(output_dir, CHECKPOINT_SUBDIR)


def step_of(tag: str) -> int:
    return int(_TAG.match(tag).group(1))


def step_folders(root: str) -> list:
    """Tags of every step_N folder under root, complete or not, oldest first."""
    if not os.path.isdir(root):
        return []
    tags = [name for name in os.listdir(root) if _TAG.match(name) and os.path.isdir(os.path.join(root, name))]
    return sorted(tags, key=step_of)


def complete_checkpoints(root: str) -> list:
    """Tags of complete checkpoints (those with a manifest) under root, oldest first."""
    return [t for t in step_folders(root) if read_manifest(os.path.join(root, t)) is not None]


def _named_by_latest(root: str):
    try:
        with open(os.path.join(root, "latest")) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def latest_checkpoint(root: str):
    """The tag `latest` names when that checkpoint is complete, else None."""
    tag = _named_by_latest(root)
    return tag if tag in complete_checkpoints(root) else None


def _remove_checkpoint(folder: str):
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(folder, MANIFEST_NAME))
    shutil.rmtree(folder, ignore_errors=True)


def _write_latest(root: str, tag: str):
    tmp = os.path.join(root, "latest.tmp")
    with open(tmp, "w") as f:
        f.write(tag + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(root, "latest"))


# --- save ---------------------------------------------------------------------------------------------------

def _first_error(local):
    """The first rank's error message (or None); a collective, so every rank decides the same way."""
    errors = [e for e in dist.all_gather_object(local) if e]
    return errors[0] if errors else None


def save_checkpoint(engine, output_dir: str, step: int, trainer_state: dict, save_total_limit: int = 0,
                    flags: dict = None) -> str:
    """Save OUTPUT_DIR/checkpoints/step_N atomically, with a manifest. Collective: every rank calls it.

    flags: the run's method-defining flags, kept in the manifest so a resume can tell whether it continues the
    same experiment. Raises CheckpointError (naming the file and errno) when the save fails; the partial
    `.tmp-step_N` is removed then and the previous checkpoint stays as it was.
    """
    root = checkpoint_root(output_dir)
    tag, tmp_tag = f"step_{step}", f".tmp-step_{step}"
    tmp = os.path.join(root, tmp_tag)
    error = None
    if dist.rank() == 0:
        try:
            shutil.rmtree(tmp, ignore_errors=True)  # debris of a save that was killed
            os.makedirs(tmp)
        except OSError as exc:
            error = describe_failure(exc, tmp)
    error = _first_error(error)
    if error is None:
        route_writes_through_python(engine)
        try:
            save_durably(rng_state(), os.path.join(tmp, f"rng_rank{dist.rank()}.pt"))
            engine.save_checkpoint(root, tag=tmp_tag, client_state={"trainer_state": trainer_state},
                                   save_latest=False)
        except Exception as exc:  # noqa: BLE001  (any failure: every rank must learn of it and clean up)
            error = f"rank {dist.rank()}: " + (str(exc) if isinstance(exc, FileWriteError)
                                              else describe_failure(exc, tmp))
        error = _first_error(error)
    if error is None:
        try:  # each rank hashes a share of the files (a 135M-parameter checkpoint is ~1.6 GB)
            names = checkpoint_files(tmp)
            mine = file_entries(tmp, names[dist.rank()::dist.world_size()])
        except OSError as exc:
            mine = {"error": describe_failure(exc, tmp)}
        shares = dist.all_gather_object(mine)
        error = next((s["error"] for s in shares if "error" in s), None)
        if error is None and dist.rank() == 0:
            try:
                files = {k: v for share in shares for k, v in share.items()}
                write_manifest(tmp, files, step, dist.world_size(), flags)
                final = os.path.join(root, tag)
                if os.path.exists(final):  # re-saving the same step (e.g. after a resume): replace it
                    shutil.rmtree(final)
                os.rename(tmp, final)
                fsync_dir(root)
                _write_latest(root, tag)
            except OSError as exc:
                error = describe_failure(exc, tmp)
        error = _first_error(error)
    if error is not None:
        if dist.rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        dist.barrier()
        previous = latest_checkpoint(root)
        raise CheckpointError(f"saving checkpoint {tag} failed: {error}. The partial {tmp} was removed; "
                              + (f"the previous checkpoint {os.path.join(root, previous)} is intact"
                                 if previous else "there is no earlier checkpoint"))
    if dist.rank() == 0 and save_total_limit > 0:
        # Checkpoints of later steps belong to a timeline this run left (--resume none, or an earlier step resumed
        # on purpose; their metrics rows were dropped too): keeping them by step number would delete this run's.
        complete = complete_checkpoints(root)
        keep = [t for t in complete if step_of(t) <= step][-save_total_limit:]
        for old in complete:
            if old not in keep:  # its manifest first: a removal cut short leaves an incomplete folder, never a bad one
                _remove_checkpoint(os.path.join(root, old))
    dist.barrier()
    return os.path.join(root, tag)


# --- which checkpoint to resume ------------------------------------------------------------------------------

@dataclass
class ResumePoint:
    root: str
    tag: str
    manifest: dict = None  # None: a checkpoint without a manifest (from before credo wrote them), loaded unchecked

    @property
    def step(self) -> int:
        return step_of(self.tag)

    @property
    def path(self) -> str:
        return os.path.join(self.root, self.tag)

    @property
    def flags(self):
        """The method-defining flags the checkpoint was trained with (None when it does not record them)."""
        return (self.manifest or {}).get("flags") or None

    def verify(self):
        """Check every file against the manifest (CheckpointError naming the file)."""
        if self.manifest is None:
            logger.warning("%s has no %s (written before credo recorded checksums): loading it unchecked",
                           self.path, "manifest.json")
            return
        verify_checkpoint(self.path, self.manifest)


def newest_complete(root: str):
    """The checkpoint to continue in a checkpoints folder: the one `latest` names when it is complete, else the
    newest complete one (with a warning). None when there are no checkpoints at all. Raises CheckpointError
    rather than starting from scratch when there are step folders but none is complete."""
    complete, named = complete_checkpoints(root), _named_by_latest(root)
    if named in complete:
        return ResumePoint(root, named, read_manifest(os.path.join(root, named)))
    if complete:
        newest = complete[-1]
        if named is None:
            why = f"{root}/latest is missing"
        elif not os.path.isdir(os.path.join(root, named)):
            why = f"{root}/latest names {named}, which does not exist"
        else:
            why = f"{root}/latest names {named}, whose save never finished (it has no manifest.json)"
        logger.warning("%s: resuming from the newest complete checkpoint, %s, instead", why, newest)
        return ResumePoint(root, newest, read_manifest(os.path.join(root, newest)))
    leftovers = step_folders(root)
    if leftovers or named:
        raise CheckpointError(
            f"{root} holds checkpoints ({', '.join(leftovers) or 'latest -> ' + named}) but none is complete (no "
            f"manifest.json: their saves never finished, or they predate credo's manifests). Refusing to start from "
            f"scratch over them: load one unchecked with --resume {root}/step_N, start afresh here with --resume "
            f"none (which overwrites them), or pick a new --output_dir")
    return None


def resolve_resume(resume: str, output_dir: str):
    """The ResumePoint for --resume auto|force|none|PATH, or None to start fresh.

    PATH may be a checkpoints folder (its `latest` is used) or one step_N folder inside it.
    """
    if resume == "none":
        return None
    if resume in ("auto", "force"):
        return newest_complete(checkpoint_root(output_dir))
    path = os.path.abspath(resume.rstrip("/"))
    if _TAG.match(os.path.basename(path)) and os.path.isdir(path):
        return ResumePoint(os.path.dirname(path), os.path.basename(path), read_manifest(path))
    point = newest_complete(path) if os.path.isdir(path) else None
    if point is None:
        raise CheckpointError(f"--resume {resume}: no checkpoint there (expected a step_N folder, or a checkpoints "
                              f"folder with step_N folders in it)")
    return point


# --- load ---------------------------------------------------------------------------------------------------

def _local_state_tensors(engine):
    """(what, tensor) for this rank's share of the weights and optimizer state: the module's parameters (their
    ZeRO-3 partitions), the optimizer's (fp32 master) parameters and its per-parameter state (Adam moments)."""
    for p in engine.module.parameters():
        yield "model weights", getattr(p, "ds_tensor", p)
    optimizer = engine.optimizer
    if optimizer is None:
        return
    # The fp32 master copies: ZeRO-3, ZeRO-1/2 and the bf16 optimizer each keep their flat partitions under their
    # own name (DeepSpeed 0.19); without ZeRO they are the torch optimizer's own parameters.
    for attr in ("fp32_partitioned_groups_flat", "single_partition_of_fp32_groups", "fp32_groups_flat_partition"):
        for t in getattr(optimizer, attr, None) or ():
            yield "fp32 master weights", t
    inner = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed's ZeRO wrappers hold the torch optimizer
    for group in inner.param_groups:
        for p in group["params"]:
            yield "fp32 master weights", p
    for state in inner.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.dim() > 0:
                yield "optimizer state", value


def nonfinite_counts(engine) -> dict:
    """{what: number of non-finite values} over every rank's share (a collective)."""
    kinds = ("model weights", "fp32 master weights", "optimizer state")
    counts = torch.zeros(len(kinds), dtype=torch.float64)
    for what, t in _local_state_tensors(engine):
        if t.is_floating_point() and t.numel():
            counts[kinds.index(what)] += float((~torch.isfinite(t.detach())).sum())
    counts = dist.all_reduce(counts)
    return {k: int(counts[i]) for i, k in enumerate(kinds) if counts[i] > 0}


def load_checkpoint(engine, root: str, tag: str) -> dict:
    """Restore engine (model, optimizer, scheduler) and this rank's RNG; return the trainer state.

    The caller has checked the files against the manifest (ResumePoint.verify). Non-finite weights or optimizer
    state are refused: resuming would train on garbage (and save it again). A checkpoint saved at another rank count
    is loaded through DeepSpeed's universal checkpoint, and the sampling streams are re-seeded (rl/run/reshard.py)."""
    folder = os.path.join(root, tag)
    manifest = read_manifest(folder)
    saved_world = saved_world_size(folder, manifest)
    moved = saved_world is not None and saved_world != dist.world_size()
    try:
        path, client_state = load_universal(engine, root, tag) if moved else engine.load_checkpoint(
            root, tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True)
    except CheckpointError:
        raise
    except Exception as exc:  # DeepSpeed's and torch's errors name no file
        raise CheckpointError(f"loading checkpoint {folder} failed: {type(exc).__name__}: {exc}") from exc
    if path is None:
        raise CheckpointError(f"DeepSpeed could not load checkpoint {tag} under {root}")
    bad = nonfinite_counts(engine)
    if bad:
        what = ", ".join(f"{n} non-finite values in the {k}" for k, n in bad.items())
        earlier = [t for t in complete_checkpoints(root) if step_of(t) < step_of(tag)]
        hint = f"; resume an earlier one with --resume {os.path.join(root, earlier[-1])}" if earlier else ""
        raise CheckpointError(f"checkpoint {folder} holds {what}: refusing to train on them{hint}")
    if moved:  # this rank's stream belonged to another layout's rank
        state = client_state["trainer_state"]
        reseed(((manifest or {}).get("flags") or {}).get("seed", 0), state["step"], dist.rank())
        announce(folder, saved_world, state["step"])
        return state
    rng_file = os.path.join(folder, f"rng_rank{dist.rank()}.pt")
    if not os.path.exists(rng_file):
        raise CheckpointError(f"{rng_file} is missing: the checkpoint was written by a run with another rank count")
    set_rng_state(torch.load(rng_file, weights_only=False))
    return client_state["trainer_state"]


def trainer_state_of(folder: str) -> dict:
    """The trainer state a checkpoint folder (step_N) holds, read without a DeepSpeed engine: its step, the data
    stream's state ("data": position, and "consumed", the data row of every prompt the run had drawn by then, in
    order), the step guard's counters, the scorer's and the method's state. Every rank's model-states file holds the
    same trainer state; the first one is read."""
    names = sorted(n for n in os.listdir(folder) if n.endswith("model_states.pt"))
    if not names:
        raise CheckpointError(f"{folder} has no *model_states.pt file: not a credo checkpoint folder")
    state = torch.load(os.path.join(folder, names[0]), map_location="cpu", weights_only=False)
    return state["trainer_state"]


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

    With LoRA (--lora_r) the weights are the base with the adapters merged in, and OUTPUT/adapter holds the adapter
    alone (peft's format). Written to a temporary sibling and renamed, so a crash mid-export never leaves a half-written `final`.
    """
    state = gathered_state_dict(engine.module)
    lora = is_lora(engine.module)
    merged = merged_state_dict(engine.module, state) if lora else state  # collective with LoRA
    if dist.rank() == 0:
        tmp = out_dir.rstrip("/") + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model = engine.module.get_base_model() if lora else engine.module
        model.save_pretrained(tmp, state_dict=merged, safe_serialization=True)
        # LoRA: the merged model loads anywhere (eval.py, vLLM); the adapter alone is kept beside it when it applies
        # to the untouched base (not with --no_only_optimize_lora, where the base weights trained too)
        if lora and base_is_frozen(engine.module):
            save_adapter(engine.module, state, os.path.join(tmp, "adapter"))
        save_tokenizer(tokenizer, tmp)  # without the run's last truncation and padding
        shutil.rmtree(out_dir, ignore_errors=True)
        os.rename(tmp, out_dir)
    dist.barrier()
