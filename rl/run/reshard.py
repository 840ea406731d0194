"""Resume on another layout: a checkpoint saved at N ranks, loaded at M.

What carries over exactly. The weights, the fp32 master weights and the Adam moments: a ZeRO checkpoint holds one
partition of them per saved rank, so it is first converted to DeepSpeed's universal checkpoint (one file per
parameter and state, `python -m deepspeed.checkpoint.ds_to_universal`), which DeepSpeed 0.19 loads at any rank
count (`load_universal` in its checkpoint config, set here for the one load). The trainer state (step, data
position, counters, scorer, method, the --sync_ref_model reference): every rank's file holds the same copy. The data
position is a count of prompts over all ranks, so the prompts of every later step are the ones the uninterrupted
run draws when the prompts per step (--per_device_generation_batch_size x ranks) stay the same; start.py refuses
--resume auto otherwise, naming the flag value that keeps them.

What cannot. Each rank's sampling stream (Python, NumPy, torch, CUDA) drew the responses of that rank's prompts: at
another rank count those prompts belong to other ranks, and a rank may have had no stream at all. credo's choice:
every rank's streams are re-seeded from the run's --seed, the step and the rank (the same on every resume at that
layout), and rank 0 says so. The next steps then sample other responses than the uninterrupted run would; where
sampling does not enter (top-k 1), the next step's metrics and weights equal the uninterrupted run's to float
rounding (tests/run/test_resume_layout.py). docs/reproducibility.md.
"""
import hashlib
import logging
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import torch

from rl.engine import dist
from rl.run.manifest import CheckpointError

logger = logging.getLogger(__name__)
PROMPTS_FLAG = "per_device_generation_batch_size"


def saved_world_size(folder: str, manifest: dict = None):
    """The rank count a checkpoint was saved at: its manifest's, else the number of per-rank RNG files."""
    if manifest and manifest.get("world_size"):
        return int(manifest["world_size"])
    ranks = [n for n in os.listdir(folder) if n.startswith("rng_rank") and n.endswith(".pt")]
    return len(ranks) or None


def prompts_per_step(saved: dict, saved_world, current: dict, world: int):
    """(saved flags to compare, a difference or None) for a run saved at saved_world ranks resumed at `world`:
    --per_device_generation_batch_size is compared as the prompts of a step (it times the rank count), so a
    resume at another rank count that keeps them compares equal, and one that does not is named with the value
    that would."""
    if not saved_world or saved_world == world or PROMPTS_FLAG not in saved or PROMPTS_FLAG not in current:
        return saved, None
    before, now = saved[PROMPTS_FLAG] * saved_world, current[PROMPTS_FLAG] * world
    compared = dict(saved, **{PROMPTS_FLAG: current[PROMPTS_FLAG]})
    if before == now:
        return compared, None
    keeps = (f"--{PROMPTS_FLAG} {before // world} keeps them" if before % world == 0 else
             f"no whole --{PROMPTS_FLAG} keeps them at {world} ranks: pick a rank count that divides {before}")
    return compared, (f"--{PROMPTS_FLAG} {saved[PROMPTS_FLAG]} at {saved_world} ranks ({before} prompts a step) -> "
                      f"{current[PROMPTS_FLAG]} at {world} ranks ({now}; {keeps})")


def universal_copy(root: str, tag: str) -> str:
    """Collective. Rank 0 converts root/tag into root/.universal-<tag>/<tag> (DeepSpeed's converter in a process of
    its own); returns that folder's parent. Raises CheckpointError on every rank when the conversion fails."""
    parent = os.path.join(root, f".universal-{tag}")
    error = None
    if dist.rank() == 0:
        shutil.rmtree(parent, ignore_errors=True)  # debris of a conversion that was killed
        os.makedirs(parent)
        workers = str(max(1, min(8, (os.cpu_count() or 2) // 2)))
        proc = subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                               os.path.join(root, tag), "--output_folder", os.path.join(parent, tag),
                               "--num_extract_workers", workers, "--num_merge_workers", workers],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(parent, ignore_errors=True)
            error = (f"converting {os.path.join(root, tag)} to a universal checkpoint (to load it at another rank "
                     f"count) failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    error = dist.all_gather_object(error)[0]
    if error:
        raise CheckpointError(error)
    return parent


def load_universal(engine, root: str, tag: str):
    """Collective: engine.load_checkpoint of root/tag saved at another rank count. Returns DeepSpeed's (path,
    client state)."""
    if not engine.zero_optimization():  # without ZeRO every rank's file holds the whole optimizer state
        return engine.load_checkpoint(root, tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True)
    parent = universal_copy(root, tag)
    config = engine._config
    config.load_universal_checkpoint = True  # DeepSpeed reads it at load time only (runtime/engine.py, 0.19)
    try:
        return engine.load_checkpoint(parent, tag=tag, load_optimizer_states=True, load_lr_scheduler_states=True)
    finally:
        config.load_universal_checkpoint = False
        dist.barrier()
        if dist.rank() == 0:
            shutil.rmtree(parent, ignore_errors=True)


def reseed(seed: int, step: int, rank: int):
    """Every sampling stream of this rank from (seed, step, rank): distinct per rank, the same on every resume."""
    value = int(hashlib.sha256(f"credo-reseed:{seed}:{step}:{rank}".encode()).hexdigest()[:15], 16)
    random.seed(value)
    np.random.seed(value % 2 ** 32)
    torch.manual_seed(value)  # the CUDA generators too


def announce(folder: str, saved_world: int, step: int):
    if dist.rank() == 0:
        logger.warning("resuming %s, saved at %d ranks, on %d: weights, optimizer state, data position and trainer "
                       "state carry over exactly; the per-rank sampling streams cannot, and are re-seeded from "
                       "--seed, the step (%d) and the rank, so the next steps sample other responses than an "
                       "uninterrupted run at %d ranks would (docs/reproducibility.md)", folder, saved_world,
                       dist.world_size(), step, saved_world)
