"""Thin collectives over deepspeed.comm that also work in a single process without a process group.

Tensors go to the accelerator's current device for the collective and come back on the caller's device: on CUDA
DeepSpeed's process group is NCCL only, and torch refuses a CPU tensor there ("No backend type associated with
device type cpu"), while many of the trainer's counters and scores live on the CPU.
"""
import os

import torch
import deepspeed.comm as dist
from deepspeed.accelerator import get_accelerator

from rl.errors import TrainingAborted


def default_single_process_env():
    """`python train.py` / `python sft.py` without a launcher: a one-rank process group on localhost."""
    if "RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ:
        return
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))


def init_distributed(timeout=None):
    """deepspeed.init_distributed (gloo on CPU, nccl on CUDA) from the launcher's environment variables; `timeout`
    (a timedelta) bounds every collective, so a dead rank ends the run instead of hanging it."""
    import deepspeed
    # Every rank's collectives use its own GPU from the first one on (DeepSpeed-Chat sets it before init too; the
    # engine would set it only later, in deepspeed.initialize). A no-op on CPU.
    if "LOCAL_RANK" in os.environ:
        get_accelerator().set_device(int(os.environ["LOCAL_RANK"]))
    skip_cpu_shm_comm_op()
    try:
        deepspeed.init_distributed(**({"timeout": timeout} if timeout is not None else {}))
    except torch.distributed.DistStoreError as exc:  # the rendezvous: some rank's launcher never joined
        raise TrainingAborted(
            f"the process group did not form: {exc} (rank {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}, "
            f"rendezvous {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}). Every node's launcher must "
            f"start within --dist_timeout_minutes and reach that address") from None


def skip_cpu_shm_comm_op():
    """Keep DeepSpeed from JIT-compiling its CPU shared-memory all-reduce at init (deepspeed/comm/torch.py
    `build_shm_op`, called from TorchBackend.__init__ whenever the op is marked compatible).

    Only `inference_all_reduce` uses that op: DeepSpeed's tensor-parallel inference layers (module_inject), which
    credo never runs on a CPU (the hybrid engine needs CUDA, and on CUDA DeepSpeed has no such op). Training's
    collectives are torch.distributed's (gloo on CPU) with or without it. Building it cost every fresh checkout a
    C++ compiler and 57 CPU-seconds at its first launch (32 s on 2 idle cores; again for .venv-vllm), a 69 MB
    /dev/shm buffer per rank that DeepSpeed never removes, and a torch build lock that a killed build left behind for
    later launches to wait on for ever. credo's reading, not DeepSpeed's default: the op is marked incompatible in
    DeepSpeed's one per-process table of compatible ops (deepspeed/ops/__init__.py keeps a single dict so that edits
    persist), so build_shm_op returns None and inference_all_reduce would fall back to torch.distributed.all_reduce."""
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:  # None on CUDA and other accelerators without the op
        import deepspeed.ops
        deepspeed.ops.__compatible_ops__[builder.NAME] = False


def shutdown():
    """Destroy the process group at the end of a successful run, while the interpreter is still whole. Left to
    interpreter finalisation, gloo's worker threads can abort the exit of a run that has finished ("terminate called
    without an active exception", SIGABRT; pytorch/pytorch#190489, #179291). Not called after a failure: a rank
    still inside a collective would deadlock it (torchtitan#1342 calls it on success only, as here)."""
    _destroy_vllm_groups()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def exit_after_success():
    """End a finished run's process without interpreter finalisation: what a normal exit runs first still runs
    (non-daemon threads joined, atexit handlers: reward workers killed, logging flushed, temporary folders removed),
    then os._exit(0). Destroying the process group before the exit (shutdown above) was not enough: a rank of a run
    that had finished and saved still aborted at exit with "terminate called without an active exception" (exit -6,
    so `deepspeed` exited non-zero), in session 7's test_resume and in CI's test_tcpo_on_math_runs_on_two_ranks on
    2026-12-06 (not reproduced here in 12 runs). The likely cause is C++ objects (gloo's, still referenced by DeepSpeed)
    destroyed while the interpreter is torn down (pytorch#179291); skipping finalisation skips that whatever holds
    them. Called only from train.py's and eval.py's `__main__`, never from main(), which tests run in pytest's own
    process."""
    import atexit
    import sys
    import threading
    for thread in threading.enumerate():  # a normal exit first waits for the non-daemon threads, then runs atexit
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # files are closed by their `with` blocks already
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing left to keep
            pass
    os._exit(0)


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
