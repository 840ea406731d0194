"""Where rl/engine/dist.py's collectives run, on a real process group (run by scripts/gpu/cuda_check.sh under the deepspeed
launcher, one rank). Writes a JSON record to --out; exits 1 when a check fails.

On CUDA DeepSpeed's group is NCCL only: a CPU tensor handed straight to its collective raises (the old helpers did
that; recorded as `raw_cpu_all_reduce`). The helpers must hand every collective a tensor on the accelerator's current
device and return the result on the caller's device.
"""
import argparse
import json
import os
import sys

import deepspeed.comm as dscomm
import torch

from rl.engine import dist


def record_collectives(seen):
    """Wrap deepspeed.comm's tensor collectives so that each call notes the device of the tensor it received."""
    real_all_reduce, real_all_gather = dscomm.all_reduce, dscomm.all_gather

    def all_reduce(tensor, *args, **kwargs):
        seen.append(["all_reduce", str(tensor.device)])
        return real_all_reduce(tensor, *args, **kwargs)

    def all_gather(tensor_list, tensor, *args, **kwargs):
        seen.append(["all_gather", str(tensor.device)])
        return real_all_gather(tensor_list, tensor, *args, **kwargs)

    dscomm.all_reduce, dscomm.all_gather = all_reduce, all_gather


def main(out_path):
    dist.init_distributed()
    comm = str(dist.comm_device())
    record = {"backend": torch.distributed.get_backend(), "comm_device": comm, "world_size": dist.world_size()}
    try:
        dscomm.all_reduce(torch.ones(2))
        record["raw_cpu_all_reduce"] = "accepted"
    except Exception as exc:  # NCCL: "No backend type associated with device type cpu"
        record["raw_cpu_all_reduce"] = f"{type(exc).__name__}: {exc}"[:300]

    seen = []
    record_collectives(seen)
    world = dist.world_size()
    counts = torch.tensor([1.0, 2.0], dtype=torch.float64)
    summed = dist.all_reduce(counts)
    largest = dist.all_reduce(torch.tensor([float(dist.rank())]), op="max")
    gathered = dist.all_gather_cat(torch.arange(3))
    on_accelerator = dist.all_reduce(torch.ones(2, device=comm))
    objects = dist.all_gather_object({"rank": dist.rank()})
    dist.barrier()
    record.update(
        seen=seen,
        all_reduce={"value": summed.tolist(), "device": str(summed.device), "dtype": str(summed.dtype)},
        all_reduce_max={"value": largest.tolist(), "device": str(largest.device)},
        all_gather_cat={"value": gathered.tolist(), "device": str(gathered.device)},
        all_reduce_on_accelerator={"value": on_accelerator.tolist(), "device": str(on_accelerator.device)},
        all_gather_object=objects)
    checks = {
        "every collective got the accelerator's device": len(seen) == 4 and all(d == comm for _, d in seen),
        "CPU inputs come back on the CPU": all(record[k]["device"] == "cpu"
                                               for k in ("all_reduce", "all_reduce_max", "all_gather_cat")),
        "accelerator inputs stay there": record["all_reduce_on_accelerator"]["device"] == comm,
        "values and dtype": (summed.tolist() == [world * 1.0, world * 2.0] and summed.dtype == torch.float64
                             and largest.tolist() == [world - 1.0] and gathered.tolist() == list(range(3)) * world
                             and on_accelerator.tolist() == [float(world)] * 2),
        "caller's tensor unchanged": counts.tolist() == [1.0, 2.0],
        "objects in rank order": objects == [{"rank": r} for r in range(world)],
    }
    if record["backend"] == "nccl":
        checks["NCCL refuses a raw CPU tensor (the defect the move fixes)"] = record["raw_cpu_all_reduce"] != "accepted"
    record["checks"] = checks
    if dist.rank() == 0:
        with open(out_path, "w") as f:
            json.dump(record, f, indent=1)
    print(json.dumps(record["checks"], indent=1))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, help="JSON record of what the collectives received and returned")
    parser.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    sys.exit(main(parser.parse_args().out))
