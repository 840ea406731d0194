"""A lost rank ends the run on every other rank within --heartbeat_timeout_s, naming it, its node and host, and the
checkpoint to resume from.

Why a heartbeat. A node whose processes are killed resets their connections, and gloo fails the next collective at
once, but only as "Connection reset by peer" from an address. A node that freezes, loses power or drops off the
network resets nothing: every collective then waits out --dist_timeout_minutes (30 by default; measured on two
one-rank nodes on one machine, a SIGSTOPped node held the other for 64 s under --dist_timeout_minutes 1, which then
printed gloo's "Timed out waiting 60000ms for recv operation" and nothing about which node or what to do).

How. Every rank's background thread bumps a counter of its own in the rendezvous store (the TCPStore at
MASTER_ADDR:MASTER_PORT that rank 0's process hosts) every BEAT_S seconds and watches the next rank's (a ring: every
lost rank is watched by a live one unless all are lost). The rank that finds its neighbour's counter unchanged for
the timeout posts the verdict in the store, and every rank reads the post at its next beat. The store lives in rank
0's process, so a store that stops answering (refused, reset, or silent past the timeout) names rank 0.
Counters, not clocks: a rank compares only its own readings, so clock skew between nodes and a watcher that was
itself paused cannot fake a loss.

What a rank does with the verdict. Its main thread is usually blocked in a collective that cannot be interrupted,
so the heartbeat thread prints the verdict and ends the process (os._exit(1)). That damages nothing already saved:
a checkpoint counts only with its manifest and `latest` moves last (rl/run/checkpoint.py), so a save cut short
leaves the previous checkpoint as the one to resume. When the main thread meets the loss first (gloo's connection
error), lost_ranks_named waits for the verdict and raises TrainingAborted with it instead of gloo's traceback.

Not covered: a rank that is alive but hung (a deadlocked main thread whose heartbeat thread still beats); the
collective timeout, --dist_timeout_minutes, bounds that.
"""
import contextlib
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import torch

from rl.engine import dist
from rl.errors import TrainingAborted
from rl.run.checkpoint import checkpoint_root, complete_checkpoints, latest_checkpoint

BEAT_S = 2.0               # at most; a fifth of the timeout when that is shorter
MISSED_AFTER_ERROR = 3     # beats a rank may miss, after a collective failed, before it counts as lost
LOST_EXIT = 1
_KEY, _LOST = "credo/heartbeat/{}", "credo/heartbeat/lost"
# Words of the errors a collective raises when a peer is gone (gloo's and NCCL's RuntimeErrors, torch's DistError).
_PEER_ERRORS = ("gloo", "nccl", "connection", "timed out", "socket", "peer", "broken pipe")


@dataclass(frozen=True)
class Member:
    rank: int
    node: str   # the launcher's node rank (DeepSpeed's CROSS_RANK, torchrun's GROUP_RANK), "?" when it sets none
    host: str

    def __str__(self):
        return f"rank {self.rank} (node {self.node}, host {self.host})"


def resume_advice(output_dir: str) -> str:
    """Which checkpoint a restart continues from: the complete one `latest` names, else the newest complete one."""
    if not output_dir:
        return "no checkpoint to resume from"
    root = checkpoint_root(output_dir)
    tag = latest_checkpoint(root) or (complete_checkpoints(root) or [None])[-1]
    if tag is None:
        return (f"no checkpoint was saved in {output_dir} yet: the run starts over (--save_steps sets how often a "
                f"checkpoint is saved)")
    return (f"the last complete checkpoint is {os.path.join(root, tag)}: once every node is back, restart every node "
            f"with the same command (--resume auto continues from it; nothing saved before the loss was damaged)")


class Heartbeat:
    def __init__(self, store, me: Member, members: list, timeout_s: float, output_dir: str):
        self.store, self.me, self.members, self.timeout_s = store, me, members, timeout_s
        self.output_dir, self.beat_s = output_dir, min(BEAT_S, timeout_s / 5)
        self.verdict = None
        self.found, self.stopped = threading.Event(), threading.Event()
        self.main_waiting = False  # the main thread met a failed collective and waits for the verdict
        self.thread = threading.Thread(target=self._run, name="credo-heartbeat", daemon=True)

    # --- the thread ---
    def _run(self):
        watched = self.members[(self.me.rank + 1) % len(self.members)]
        seen = {}  # rank -> (counter, when it last changed): the watched rank's, and every rank's once suspected
        while not self.stopped.wait(self.beat_s):
            try:
                verdict = self._beat(watched, seen)
            except Exception:  # noqa: BLE001 (a store that fails in any way has lost rank 0's process)
                if self.me.rank == 0:  # its own store, in this process: a hiccup, not a loss
                    continue
                verdict = (f"{self.members[0]} stopped answering: the rendezvous store it hosts at "
                           f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} fails (its process or "
                           f"node died, froze or lost the network)")
            if verdict and not self.stopped.is_set():
                self._lost(verdict)
                return

    def _beat(self, watched: Member, seen: dict):
        self.store.add(_KEY.format(self.me.rank), 1)
        if self.store.check([_LOST]):
            return self.store.get(_LOST).decode()
        now = time.monotonic()
        suspects = self.members if self.main_waiting else [watched]
        for member in suspects:
            if member.rank == self.me.rank:
                continue
            count = int(self.store.get(_KEY.format(member.rank)))
            last = seen.get(member.rank)
            if last is None or last[0] != count:
                seen[member.rank] = (count, now)
                continue
            silent = now - last[1]
            limit = min(self.timeout_s, MISSED_AFTER_ERROR * self.beat_s) if self.main_waiting else self.timeout_s
            if silent >= limit:
                verdict = (f"{member} stopped answering: no heartbeat for {silent:.0f} s (its process or node died, "
                           f"froze or lost the network)")
                with contextlib.suppress(Exception):
                    self.store.set(_LOST, verdict)  # the other ranks read it at their next beat
                return verdict
        return None

    def _lost(self, verdict: str):
        self.verdict = verdict
        self.found.set()
        if self.main_waiting:  # the main thread raises TrainingAborted with it (lost_ranks_named)
            return
        print(f"\n{os.path.basename(sys.argv[0]) or 'credo'}: stopped on {self.me}: {self.message()}", file=sys.stderr,
              flush=True)
        os._exit(LOST_EXIT)  # the main thread is blocked in a collective that would wait --dist_timeout_minutes

    def message(self) -> str:
        return f"{self.verdict}; the run cannot go on without its share of the model: {resume_advice(self.output_dir)}"

    # --- the main thread ---
    def verdict_after(self, exc: BaseException):
        """After a failed collective: the verdict once the heartbeat has one (at most the timeout), else None."""
        if isinstance(exc, TrainingAborted) or not any(w in str(exc).lower() for w in _PEER_ERRORS):
            return None
        self.main_waiting = True
        return self.message() if self.found.wait(self.timeout_s + 2 * self.beat_s) else None

    def stop(self):
        self.stopped.set()
        self.thread.join(timeout=30)


_active = None  # this process's Heartbeat while a run goes on


def node_rank(environ=os.environ) -> str:
    return environ.get("CROSS_RANK") or environ.get("GROUP_RANK") or "?"


def start_heartbeat(output_dir: str, timeout_s: float):
    """Collective: every rank starts beating (a no-op with one rank, with --heartbeat_timeout_s 0, or without a
    MASTER_ADDR:MASTER_PORT store, as under mpirun without them)."""
    global _active
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if timeout_s <= 0 or dist.world_size() == 1 or not addr or not port:
        return None
    members = [Member(r, node, host) for r, (node, host) in
               enumerate(dist.all_gather_object((node_rank(), socket.gethostname())))]
    # A client of its own: its timeout bounds a call to a frozen store, and no call of the process group's waits on it
    store = torch.distributed.TCPStore(addr, int(port), is_master=False, timeout=timedelta(seconds=timeout_s),
                                       wait_for_workers=False)
    store.set(_KEY.format(dist.rank()), "0")
    dist.barrier()  # every rank's counter exists before anyone reads one
    _active = Heartbeat(store, members[dist.rank()], members, timeout_s, output_dir)
    _active.thread.start()
    return _active


@contextlib.contextmanager
def lost_ranks_named():
    """Around a run (train.py, sft.py): a collective that fails because a rank is lost raises TrainingAborted naming
    it and the checkpoint to resume from. On a normal end, every rank stops its heartbeat and meets the others (a
    barrier) before any leaves: a rank whose process ends first takes the store with it (rank 0) or stops beating,
    which a rank still finishing would otherwise report as a loss."""
    global _active
    try:
        yield
    except BaseException as exc:
        beat, _active = _active, None
        verdict = beat.verdict_after(exc) if beat is not None else None
        if beat is not None:
            beat.stopped.set()  # this rank is ending: the others leaving from here on is no loss to report
        if verdict is not None:
            raise TrainingAborted(verdict) from None
        raise
    if _active is not None:
        _active.stop()
        _active = None
        dist.barrier()
