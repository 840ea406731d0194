"""The pre-flight check at start, before any model is loaded: every rank reaches every other over the collective
backend within a bounded time, and all agree on the flags, the model and the training data; otherwise the run stops
on every rank naming the rank (and host) that is missing or disagrees.

Why: on several nodes each launcher agent parses its own command line, reads its own copy of the model folder and
its own data file. A node started with another flag, an older checkpoint of the model or an edited data file would
otherwise train on: its ranks' gradients would be averaged with the others' as if they were the same experiment.
"""
import hashlib
import json
import os
import socket
from datetime import timedelta


from rl.engine import dist
from rl.errors import TrainingAborted

# Flags that may differ between ranks of one run: set per rank by the launcher.
PER_RANK_FLAGS = frozenset({"local_rank"})
MODEL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def model_fingerprint(path: str) -> str:
    """A local model folder by its config and tokenizer contents and its weight files' names and sizes (hashing
    GBs of weights at every start would cost more than it finds); a hub id by its name."""
    if not os.path.isdir(path):
        return f"hub:{path}"
    h = hashlib.sha256()
    for name in sorted(os.listdir(path)):
        full = os.path.join(path, name)
        if name in MODEL_FILES:
            with open(full, "rb") as f:
                h.update(name.encode() + b"\0" + f.read())
        elif name.endswith((".safetensors", ".bin")):
            h.update(f"{name}:{os.path.getsize(full)}".encode())
    return h.hexdigest()[:16]


def _reach_every_rank(timeout_s: float):
    """A gloo barrier that names the ranks that did not arrive in time (torch's monitored_barrier; on CUDA, over a
    gloo side group, as NCCL has no monitored barrier)."""
    if not dist.is_dist() or dist.world_size() == 1:
        return
    import torch.distributed as tdist
    group = None if tdist.get_backend() == "gloo" else tdist.new_group(backend="gloo")
    try:
        tdist.monitored_barrier(group=group, timeout=timedelta(seconds=timeout_s), wait_all_ranks=True)
    except RuntimeError as exc:
        raise TrainingAborted(f"pre-flight: not every rank reached the others within {timeout_s:g} s: {exc}. "
                              f"Check that every node's launcher started and can reach MASTER_ADDR "
                              f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}") from None


def disagreements(views: list) -> list:
    """Each rank whose view differs from rank 0's, with what differs. views: [{"host", "flags", "model", "data"}]
    in rank order. Pure function."""
    out = []
    first = views[0]
    for rank, view in enumerate(views[1:], start=1):
        what = []
        flags = sorted(k for k in set(first["flags"]) | set(view["flags"])
                       if first["flags"].get(k) != view["flags"].get(k))
        if flags:
            what.append("flags " + ", ".join(f"--{k} {view['flags'].get(k)!r} (rank 0: {first['flags'].get(k)!r})"
                                            for k in flags[:5]))
        for key, name in (("model", "the model (config, tokenizer, weight files)"), ("data", "the training data")):
            if view[key] != first[key]:
                what.append(name)
        if what:
            out.append(f"rank {rank} on {view['host']}: {'; '.join(what)}")
    return out


def preflight(flags: dict, model_path: str, data_digest: str, timeout_s: float = 120.0):
    """Collective. flags: the run's parsed flags (plain JSON values); data_digest: the training rows' digest."""
    _reach_every_rank(timeout_s)
    view = {"host": socket.gethostname(), "flags": {k: v for k, v in flags.items() if k not in PER_RANK_FLAGS},
            "model": model_fingerprint(model_path), "data": data_digest}
    views = dist.all_gather_object(view)
    bad = disagreements(views)
    if bad:
        raise TrainingAborted(f"pre-flight: not every rank runs rank 0's experiment (rank 0 on {views[0]['host']}): "
                              + " | ".join(bad) + ". Start every node with the same flags, model folder and data")
