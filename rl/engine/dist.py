"""Thin collectives over deepspeed.comm that also work in a single process without a process group.

Tensors go to the accelerator's current device for the collective and come back on the caller's device: on CUDA
DeepSpeed's process group is NCCL only, and torch refuses a CPU tensor there ("No backend type associated with
device type cpu"), while many of the trainer's counters and scores live on the CPU.
"""
import glob
import os

import torch
import deepspeed.comm as dist
from deepspeed.accelerator import get_accelerator

from rl import REPO_ROOT
from rl.engine.comm_op_build import load_shm_comm_op



def own_extensions_dir() -> str:
    """credo's default TORCH_EXTENSIONS_DIR: one folder per checkout and per Python environment. .venv and
    .venv-vllm compile the comm op with different include paths, so torch's build hash differs: in one shared folder
    each rebuilt the op over the other's (45-95 s on 2 cores, several times per suite run)."""
    import hashlib
    import sys
    env = hashlib.sha256(os.path.realpath(sys.prefix).encode()).hexdigest()[:8]
    return os.path.join(REPO_ROOT, ".cache", "torch_extensions", f"{os.path.basename(sys.prefix)}-{env}")


def init_distributed(timeout=None):
    """deepspeed.init_distributed (gloo on CPU, nccl on CUDA) from the launcher's environment variables; `timeout`
    (a timedelta) bounds every collective, so a dead rank ends the run instead of hanging it."""
    import deepspeed
    # Every rank's collectives use its own GPU from the first one on (DeepSpeed-Chat sets it before init too; the
    # engine would set it only later, in deepspeed.initialize). A no-op on CPU.
    if "LOCAL_RANK" in os.environ:
        get_accelerator().set_device(int(os.environ["LOCAL_RANK"]))
    # DeepSpeed JIT-builds its CPU shared-memory comm op at init. A build folder per checkout and venv keeps two
    # checkouts (or venvs) from rebuilding over each other's files and waiting on each other's lock; the op is
    # loaded first under a lock that a killed build cannot leave behind (rl/engine/comm_op_build.py).
    own_dir = own_extensions_dir()
    extensions_dir = os.environ.setdefault("TORCH_EXTENSIONS_DIR", own_dir)
    load_shm_comm_op(extensions_dir, owned=os.path.abspath(extensions_dir) == own_dir)
    deepspeed.init_distributed(**({"timeout": timeout} if timeout is not None else {}))
    unlink_shm_buffer()


def shutdown():
    """Destroy the process group at the end of a successful run, while the interpreter is still whole. Left to
    interpreter finalisation, gloo's worker threads can abort the exit of a run that has finished ("terminate called
    without an active exception", SIGABRT; pytorch/pytorch#190489, #179291). Not called after a failure: a rank
    still inside a collective would deadlock it (torchtitan#1342 calls it on success only, as here)."""
    _destroy_vllm_groups()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _destroy_vllm_groups():
    """A colocated vLLM engine (--rollout_backend vllm) made process groups of its own under the world group. Its
    exit-time finalizer destroys them, and after the world group is gone that raises `ValueError: Invalid process
    group specified`: a traceback printed after every successful run. Destroyed here first, vLLM's own teardown
    then finds nothing left to do. (It also destroys the world group, which the caller then skips.)"""
    import sys
    parallel_state = sys.modules.get("vllm.distributed.parallel_state")
    if parallel_state is None:
        return
    for teardown in ("destroy_model_parallel", "destroy_distributed_environment"):
        if hasattr(parallel_state, teardown):
            getattr(parallel_state, teardown)()


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


def comm_device() -> torch.device:
    """Where the process group's collectives run: the accelerator's current device (cuda:LOCAL_RANK, or cpu)."""
    return torch.device(get_accelerator().current_device_name())


def all_gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Concatenate equal-shaped tensors from all ranks along dim 0, in rank order; on the caller's device."""
    # A process group of one rank still runs the collective, so that one GPU exercises the path many GPUs take.
    if not is_dist():
        return t
    local = t.to(comm_device()).contiguous()
    out = [torch.empty_like(local) for _ in range(world_size())]
    dist.all_gather(out, local)
    return torch.cat(out, dim=0).to(t.device)


def all_reduce(t: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """A reduced copy of `t` on the caller's device; `t` itself is never changed (torch's all_reduce is in place).
    Without a process group, `t` itself."""
    if not is_dist():
        return t
    reduced = t.to(comm_device(), copy=True)
    dist.all_reduce(reduced, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
    return reduced.to(t.device)


def all_reduce_dict(values: dict, op: str = "sum") -> dict:
    """{name: float} reduced over ranks in one collective (float64), by name: every rank passes the same names."""
    names = sorted(values)
    reduced = all_reduce(torch.tensor([float(values[k]) for k in names], dtype=torch.float64), op)
    return {k: reduced[i].item() for i, k in enumerate(names)}


def barrier():
    if is_dist():
        dist.barrier()


def all_gather_object(obj) -> list:
    """One picklable object from every rank, in rank order (torch moves the pickles to the group's device itself)."""
    if not is_dist():
        return [obj]
    out = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out
