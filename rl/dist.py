"""Thin collectives over deepspeed.comm that also work in a single process without a process group."""
import torch
import deepspeed.comm as dist


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
