"""DeepSpeed's CPU shared-memory comm op, JIT-built at init, under a lock that a killed process cannot leave behind.

torch's JIT build (torch/utils/cpp_extension.py `_jit_compile`) takes a `lock` file in the op's build folder every
time the op is loaded, built or not (torch/utils/file_baton.py), and a process killed while it holds it (a Ctrl-C or
SIGKILL in the first launch's minutes-long compile, or a kill in the short no-op check later) leaves the file
behind: every later launch then waits on it for ever, silently, after "Setting accelerator to CPU". Here the op is
loaded before deepspeed.init_distributed, holding an flock (which the kernel releases when its holder dies) on a
file beside the build folders. Every credo process loads the op only inside that flock, and DeepSpeed's own load in
init_distributed is then answered from DeepSpeed's in-process cache (op_builder/builder.py `_loaded_ops`) without
touching torch's lock. So a `lock` in the comm op's build folder, found while holding the flock, was left by a dead
process, and is removed (other ops' folders are not touched: they are built outside this flock). That is done
only in credo's own build folder (rl/engine/dist.py's default TORCH_EXTENSIONS_DIR): in a folder a user shares with other
programs, a `lock` may be live.
"""
import fcntl
import logging
import os
from contextlib import contextmanager

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
