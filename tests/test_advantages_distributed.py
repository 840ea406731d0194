"""Group statistics when a step's groups span ranks: two gloo processes gather, compute, keep their slice."""
import os

import torch
import torch.distributed as tdist
import torch.multiprocessing as mp

from rl.advantages import grpo
from tests.helpers import free_port

SCORES = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5])
GROUPS = torch.tensor([0, 0, 1, 1, 0, 0, 1, 1])  # both groups have members on both ranks


def _worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    tdist.init_process_group("gloo", rank=rank, world_size=2)
    import deepspeed.comm as dscomm
    dscomm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False, rank=rank, world_size=2)
    from rl import dist
    local = slice(rank * 4, rank * 4 + 4)
    adv = grpo(dist.all_gather_cat(SCORES[local]), dist.all_gather_cat(GROUPS[local]))[local]
    out[rank] = adv.tolist()
    tdist.destroy_process_group()


def test_two_ranks_get_the_single_process_advantages():
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(_worker, args=(free_port(), out), nprocs=2, join=True)
    expected = grpo(SCORES, GROUPS).tolist()
    assert out[0] + out[1] == expected
