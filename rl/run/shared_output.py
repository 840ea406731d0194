"""Every rank must see the one --output_dir: checked at start, before any model is loaded.

Each rank writes its own checkpoint shards and RNG state into OUTPUT_DIR/checkpoints/.tmp-step_N, which rank 0
creates, and rank 0 lists every rank's files into the manifest; a resume is decided by rank 0 and loaded by every
rank from the same path. On a folder that is local to each node (a node's own disk instead of NFS or Lustre), the
first save would fail on the other nodes' ranks ("No such file or directory") after hours of training, and a resume
would find nothing there. This check makes that a clear error at step 0. (DeepSpeed's `use_node_local_storage`
mode, one copy per node, is not what credo's atomic save-and-manifest protocol does: credo's reading is one shared
folder, as DeepSpeed-Chat's multi-node scripts assume.)
"""
import os
import socket
import uuid

from rl.engine import dist
from rl.errors import TrainingAborted


def check_output_dir_shared(output_dir: str):
    """Collective. Raises TrainingAborted on every rank when some rank does not see a file rank 0 wrote in
    output_dir (which rank 0 has created); naming those ranks and their hosts."""
    if dist.world_size() == 1:
        return
    token = dist.all_gather_object(uuid.uuid4().hex)[0]  # rank 0's: one name for the whole world
    probe = os.path.join(output_dir, f".shared-check-{token}")
    error = None
    if dist.rank() == 0:
        try:
            with open(probe, "w") as f:
                f.write(token)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            error = f"--output_dir {output_dir}: rank 0 cannot write there: {exc}"
    error = dist.all_gather_object(error)[0]
    if error is None:
        try:
            with open(probe) as f:
                seen = f.read() == token
        except OSError:
            seen = False
        views = dist.all_gather_object((seen, socket.gethostname()))
        dist.barrier()  # everyone has looked before the probe goes
        if dist.rank() == 0:
            try:
                os.unlink(probe)
            except OSError:
                pass
        blind = [f"rank {r} on {host}" for r, (ok, host) in enumerate(views) if not ok]
        if blind:
            error = (f"--output_dir {output_dir} is not shared by every rank: {', '.join(blind)} cannot see the "
                     f"file rank 0 (on {views[0][1]}) wrote there. Every rank writes its checkpoint shards into this "
                     f"folder and rank 0 gathers them into one manifest, so a multi-node run needs --output_dir on a "
                     f"filesystem that every node mounts at the same path (NFS, Lustre, ...)")
    if error is not None:
        raise TrainingAborted(error)
