"""rl/engine/dist.py under a real two-process gloo group: collectives get their tensors on the accelerator's device and
hand results back on the caller's, without touching the caller's tensor.

On CUDA DeepSpeed's group is NCCL only, which refuses CPU tensors. This machine has no second device kind, so the
device check reports a fake accelerator device ("meta") and records what the collective receives; the values and
the way back are checked with the real gloo collectives.
"""
import os

import pytest
import torch
import torch.distributed as tdist
import torch.multiprocessing as mp

from tests.helpers import free_port


class _Received(Exception):
    """Raised by the recording collective once it has seen its input (a meta tensor has no data to reduce)."""


def _devices_seen_by_collectives(rank):
    """For each helper: the devices of the tensors its collective received while the accelerator says 'meta'."""
    import deepspeed.comm as dscomm
    from deepspeed.accelerator import get_accelerator
    from rl.engine import dist

    seen, accelerator = {}, get_accelerator()
    real = {name: getattr(dscomm, name) for name in ("all_reduce", "all_gather")}
    real_device_name = accelerator.current_device_name

    def recording(name):
        def collective(*tensors, **kwargs):
            flat = [t for arg in tensors for t in (arg if isinstance(arg, list) else [arg])]
            seen[name] = sorted({str(t.device) for t in flat})
            raise _Received()
        return collective

    try:
        accelerator.current_device_name = lambda: "meta"
        for name in real:
            setattr(dscomm, name, recording(name))
        for name, call in (("all_reduce", lambda: dist.all_reduce(torch.tensor([1.0]))),
                           ("all_gather", lambda: dist.all_gather_cat(torch.tensor([float(rank)])))):
            try:
                call()
            except _Received:
                pass
    finally:
        accelerator.current_device_name = real_device_name
        for name, fn in real.items():
            setattr(dscomm, name, fn)
    return seen


def _worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    tdist.init_process_group("gloo", rank=rank, world_size=2)
    import deepspeed.comm as dscomm
    from rl.engine import dist
    dist.skip_cpu_shm_comm_op()  # as rl.engine.dist.init_distributed does in every credo process: nothing to compile
    dscomm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False, rank=rank, world_size=2)

    counts = torch.tensor([float(rank + 1), 10.0 * (rank + 1)], dtype=torch.float64)
    summed = dist.all_reduce(counts)
    largest = dist.all_reduce(torch.tensor([float(rank)]), op="max")
    gathered = dist.all_gather_cat(torch.arange(2, dtype=torch.int64) + 2 * rank)
    # the two ranks build their dicts in different orders: the reduction pairs values by name, not by position
    named = {"tokens": 4.0 * (rank + 1), "loss": 0.5 * (rank + 1)}
    named = dist.all_reduce_dict(named if rank == 0 else dict(reversed(named.items())))
    out[rank] = {
        "caller_tensor_after": counts.tolist(),
        "sum": summed.tolist(), "sum_dtype": str(summed.dtype), "sum_device": str(summed.device),
        "sum_is_new_tensor": summed.data_ptr() != counts.data_ptr(),
        "max": largest.tolist(), "named": named, "gathered": gathered.tolist(), "gathered_dtype": str(gathered.dtype),
        "objects": dist.all_gather_object({"rank": rank}),
        "devices_seen": _devices_seen_by_collectives(rank),
    }
    tdist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks():
    out = mp.Manager().dict()
    mp.spawn(_worker, args=(free_port(), out), nprocs=2, join=True)
    return dict(out)


def test_collectives_receive_tensors_on_the_accelerators_device(two_ranks):
    for rank in (0, 1):
        assert two_ranks[rank]["devices_seen"] == {"all_reduce": ["meta"], "all_gather": ["meta"]}


def test_all_reduce_returns_a_new_tensor_and_leaves_the_callers_alone(two_ranks):
    for rank in (0, 1):
        r = two_ranks[rank]
        assert r["caller_tensor_after"] == [float(rank + 1), 10.0 * (rank + 1)]
        assert r["sum"] == [3.0, 30.0] and r["sum_dtype"] == "torch.float64" and r["sum_device"] == "cpu"
        assert r["sum_is_new_tensor"] and r["max"] == [1.0]


def test_all_reduce_dict_sums_values_by_name_whatever_the_insertion_order(two_ranks):
    for rank in (0, 1):
        assert two_ranks[rank]["named"] == {"loss": 1.5, "tokens": 12.0}


def test_all_gather_cat_concatenates_in_rank_order(two_ranks):
    for rank in (0, 1):
        assert two_ranks[rank]["gathered"] == [0, 1, 2, 3] and two_ranks[rank]["gathered_dtype"] == "torch.int64"
        assert two_ranks[rank]["objects"] == [{"rank": 0}, {"rank": 1}]


def test_without_a_process_group_helpers_pass_values_through():
    from rl.engine import dist
    t = torch.tensor([2.0, 5.0])
    assert not dist.is_dist()
    assert dist.all_reduce(t) is t and dist.all_gather_cat(t) is t and dist.all_gather_object(3) == [3]


EXITING_CHILD = r"""
import atexit, sys, threading, time
from rl.engine.dist import exit_after_success
out = sys.argv[1]
atexit.register(lambda: open(out + ".atexit", "w").write("ran"))
def late_writer():
    time.sleep(0.5)
    open(out + ".thread", "w").write("done")
threading.Thread(target=late_writer).start()  # non-daemon: a normal exit waits for it
sys.stdout.write("done: buffered, no newline")  # stdout is a pipe here: block-buffered
exit_after_success()
raise SystemExit("not reached")
"""


def test_exit_after_success_keeps_what_a_normal_exit_does_and_exits_zero(tmp_path):
    """train.py's and eval.py's exit after a finished run skips interpreter finalisation (where a rank aborted with
    'terminate called without an active exception') but still joins threads, runs atexit handlers (the reward
    workers' killer among them) and flushes what was printed."""
    import subprocess
    import sys
    from tests.helpers import REPO_ROOT
    out = str(tmp_path / "mark")
    proc = subprocess.run([sys.executable, "-c", EXITING_CHILD, out], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": REPO_ROOT}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("done: buffered, no newline")  # (DeepSpeed prints its accelerator line first)
    assert open(out + ".atexit").read() == "ran"
    assert open(out + ".thread").read() == "done"
