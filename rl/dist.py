"""Thin collectives over deepspeed.comm that also work in a single process without a process group."""
import glob
import os

import torch
import deepspeed.comm as dist

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def init_distributed(timeout=None):
    """deepspeed.init_distributed (gloo on CPU, nccl on CUDA) from the launcher's environment variables; `timeout`
    (a timedelta) bounds every collective, so a dead rank ends the run instead of hanging it."""
    import deepspeed
    # DeepSpeed JIT-builds its CPU shared-memory comm op at init. A build folder per checkout keeps two
    # checkouts (or venvs) from rebuilding over each other's files and waiting on each other's lock.
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(REPO_ROOT, ".cache", "torch_extensions"))
    deepspeed.init_distributed(**({"timeout": timeout} if timeout is not None else {}))
    unlink_shm_buffer()


def unlink_shm_buffer():
    """DeepSpeed's CPU comm op maps a 69 MB /dev/shm file per rank and never removes it: every launch leaked one per
    rank (we found 15 GB of them on a 24 GB machine). Once every rank has mapped every other rank's buffer (true
    after init, checked by the barrier) the name is not needed: unlinking it now frees the memory when the
    processes end, however they end. (DeepSpeed names it deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>.)"""
    if not os.path.isdir("/dev/shm"):
        return
    barrier()
    port = os.environ.get("MASTER_PORT", "")
    for path in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_*_{port}_{rank()}"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def is_dist() -> bool:
    return dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_dist() else 0


def world_size() -> int:
    return dist.get_world_size() if is_dist() else 1


def all_gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Concatenate equal-shaped tensors from all ranks along dim 0, in rank order."""
    if world_size() == 1:
        return t
    out = [torch.empty_like(t) for _ in range(world_size())]
    dist.all_gather(out, t.contiguous())
    return torch.cat(out, dim=0)


def all_reduce(t: torch.Tensor, op: str = "sum") -> torch.Tensor:
    if world_size() == 1:
        return t
    t = t.clone()
    dist.all_reduce(t, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
    return t


def barrier():
    if world_size() > 1:
        dist.barrier()


def all_gather_object(obj) -> list:
    """One picklable object from every rank, in rank order."""
    if world_size() == 1:
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out
