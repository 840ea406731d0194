"""Thin collectives over deepspeed.comm that also work in a single process without a process group.

Tensors go to the accelerator's current device for the collective and come back on the caller's device: on CUDA
DeepSpeed's process group is NCCL only, and torch refuses a CPU tensor there ("No backend type associated with
device type cpu"), while many of the trainer's counters and scores live on the CPU.
"""
import fcntl
import glob
import logging
import os
from contextlib import contextmanager

import torch
import deepspeed.comm as dist
from deepspeed.accelerator import get_accelerator

from rl import REPO_ROOT
from rl.errors import TrainingAborted



def own_extensions_dir() -> str:
    """credo's default TORCH_EXTENSIONS_DIR: one folder per checkout and per Python environment. .venv and
    .venv-vllm compile the comm op with different include paths, so torch's build hash differs: in one shared folder
    each rebuilt the op over the other's (45-95 s on 2 cores, several times per suite run)."""
    import hashlib
    import sys
    env = hashlib.sha256(os.path.realpath(sys.prefix).encode()).hexdigest()[:8]
    return os.path.join(REPO_ROOT, ".cache", "torch_extensions", f"{os.path.basename(sys.prefix)}-{env}")


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
    # DeepSpeed JIT-builds its CPU shared-memory comm op at init. A build folder per checkout and venv keeps two
    # checkouts (or venvs) from rebuilding over each other's files and waiting on each other's lock; the op is
    # loaded first under a lock that a killed build cannot leave behind (rl/engine/dist.py).
    own_dir = own_extensions_dir()
    extensions_dir = os.environ.setdefault("TORCH_EXTENSIONS_DIR", own_dir)
    load_shm_comm_op(extensions_dir, owned=os.path.abspath(extensions_dir) == own_dir)
    try:
        deepspeed.init_distributed(**({"timeout": timeout} if timeout is not None else {}))
    except torch.distributed.DistStoreError as exc:  # the rendezvous: some rank's launcher never joined
        raise TrainingAborted(
            f"the process group did not form: {exc} (rank {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}, "
            f"rendezvous {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}). Every node's launcher must "
            f"start within --dist_timeout_minutes and reach that address") from None
    unlink_shm_buffer()


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


# --- comm op build ---
# DeepSpeed's CPU shared-memory comm op, JIT-built at init, under a lock that a killed process cannot leave behind.
#
# torch's JIT build (torch/utils/cpp_extension.py `_jit_compile`) takes a `lock` file in the op's build folder every
# time the op is loaded, built or not (torch/utils/file_baton.py), and a process killed while it holds it (a Ctrl-C or
# SIGKILL in the first launch's minutes-long compile, or a kill in the short no-op check later) leaves the file
# behind: every later launch then waits on it for ever, silently, after "Setting accelerator to CPU". Here the op is
# loaded before deepspeed.init_distributed, holding an flock (which the kernel releases when its holder dies) on a
# file beside the build folders. Every credo process loads the op only inside that flock, and DeepSpeed's own load in
# init_distributed is then answered from DeepSpeed's in-process cache (op_builder/builder.py `_loaded_ops`) without
# touching torch's lock. So a `lock` in the comm op's build folder, found while holding the flock, was left by a dead
# process, and is removed (other ops' folders are not touched: they are built outside this flock). That is done
# only in credo's own build folder (rl/engine/dist.py's default TORCH_EXTENSIONS_DIR): in a folder a user shares with other
# programs, a `lock` may be live.

logger = logging.getLogger(__name__)
OP_BUILDER = "ShareMemCommBuilder"


@contextmanager
def build_lock(extensions_dir: str):
    """Hold an exclusive flock on extensions_dir/credo-build.lock (created if missing) for the block."""
    os.makedirs(extensions_dir, exist_ok=True)
    with open(os.path.join(extensions_dir, "credo-build.lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_stale_baton(extensions_dir: str, op_name: str) -> list:
    """Delete torch's `lock` file in the build folder of op_name; call only while holding build_lock. Only that
    folder: other ops (DeepSpeed's cpu_adam under --offload, say) are built outside this lock, so their `lock` may
    belong to a live build of another run. Returns the paths removed."""
    baton = os.path.join(extensions_dir, op_name, "lock")
    if not os.path.isfile(baton):
        return []
    os.remove(baton)
    logger.warning("removed %s: a build lock left by a process killed while building DeepSpeed's comm op "
                   "(it would have made this launch wait for ever)", baton)
    return [baton]


def load_shm_comm_op(extensions_dir: str, owned: bool) -> None:
    """Build (first time) or load DeepSpeed's shared-memory comm op where DeepSpeed itself would (deepspeed/comm/
    torch.py `build_shm_op`: nothing on accelerators without it). owned: extensions_dir is credo's own folder, so a
    stale torch lock in it may be removed."""
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    builder = get_accelerator().create_op_builder(OP_BUILDER)
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return
    with build_lock(extensions_dir):
        if owned:
            remove_stale_baton(extensions_dir, builder.name)  # torch builds op `name` in extensions_dir/name
        builder.load(verbose=False)
