"""rl/run/heartbeat.py without a launch: the verdicts the beat reaches from a store's counters, and what it advises.
The launches (a killed and a frozen node) are tests/run/test_node_failures.py."""
import os
import time

import pytest

from rl.errors import TrainingAborted
from rl.run.heartbeat import _KEY, _LOST, Heartbeat, Member, node_rank, resume_advice
from rl.run.manifest import write_manifest


class Store:
    """The four TCPStore calls the heartbeat makes, on a dict."""

    def __init__(self, **counters):
        self.values = {_KEY.format(int(r)): str(v).encode() for r, v in counters.items()}

    def add(self, key, n):
        self.values[key] = str(int(self.values.get(key, b"0")) + n).encode()

    def check(self, keys):
        return all(k in self.values for k in keys)

    def get(self, key):
        return self.values[key]

    def set(self, key, value):
        self.values[key] = value.encode() if isinstance(value, str) else value


MEMBERS = [Member(0, "0", "node-a"), Member(1, "1", "node-b"), Member(2, "1", "node-b")]


def heartbeat(store, rank=0, timeout_s=10.0, output_dir=None):
    return Heartbeat(store, MEMBERS[rank], MEMBERS, timeout_s, output_dir)


def test_a_neighbour_whose_counter_stops_is_named_and_posted_for_the_others():
    store = Store(**{"0": 5, "1": 7, "2": 3})
    beat, seen = heartbeat(store), {}
    assert beat._beat(MEMBERS[1], seen) is None  # first reading
    store.add(_KEY.format(1), 1)
    assert beat._beat(MEMBERS[1], seen) is None  # it moved
    seen[1] = (seen[1][0], time.monotonic() - 11)  # unchanged for longer than the timeout
    verdict = beat._beat(MEMBERS[1], seen)
    assert verdict.startswith("rank 1 (node 1, host node-b) stopped answering: no heartbeat for 11 s")
    assert store.get(_LOST).decode() == verdict
    assert heartbeat(store, rank=2)._beat(MEMBERS[0], {}) == verdict  # another rank reads the post


def test_a_watcher_that_was_paused_itself_sees_a_moved_counter_as_alive():
    store = Store(**{"0": 5, "1": 7, "2": 3})
    beat, seen = heartbeat(store), {1: (6, time.monotonic() - 60)}  # last read long ago, the counter moved since
    assert beat._beat(MEMBERS[1], seen) is None


def test_after_a_failed_collective_every_rank_is_checked_and_three_missed_beats_suffice():
    store = Store(**{"0": 5, "1": 7, "2": 3})
    beat = heartbeat(store, timeout_s=60)
    beat.main_waiting = True
    seen = {1: (7, time.monotonic() - 1), 2: (3, time.monotonic() - 3 * beat.beat_s)}
    assert beat._beat(MEMBERS[1], seen).startswith("rank 2 (node 1, host node-b) stopped answering")


def test_only_errors_of_a_collective_wait_for_a_verdict():
    beat = heartbeat(Store(**{"0": 0, "1": 0, "2": 0}), timeout_s=0.5)
    assert beat.verdict_after(TrainingAborted("reward failures")) is None and not beat.main_waiting
    assert beat.verdict_after(ValueError("bad row")) is None and not beat.main_waiting
    beat.verdict = "rank 1 (node 1, host node-b) stopped answering"
    beat.found.set()
    assert beat.verdict_after(RuntimeError("[gloo/transport/tcp/pair.cc:537] Connection reset by peer")) \
        .startswith("rank 1 (node 1, host node-b) stopped answering; the run cannot go on without its share")


def test_the_advice_names_the_checkpoint_latest_names(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (2, 4):
        os.makedirs(root / f"step_{step}")
        write_manifest(str(root / f"step_{step}"), {}, step, 2, None)
    (root / "latest").write_text("step_4\n")
    os.makedirs(root / ".tmp-step_6")  # a save the loss cut short
    assert f"the last complete checkpoint is {root / 'step_4'}: once every node is back" in resume_advice(str(tmp_path))
    (root / "latest").write_text("step_6\n")  # named, never completed
    assert f"checkpoint is {root / 'step_4'}" in resume_advice(str(tmp_path))


def test_without_a_checkpoint_the_advice_says_the_run_starts_over(tmp_path):
    advice = resume_advice(str(tmp_path))
    assert "no checkpoint was saved in" in advice and "starts over" in advice


@pytest.mark.parametrize("environ,node", [({"CROSS_RANK": "3"}, "3"), ({"GROUP_RANK": "2"}, "2"), ({}, "?")])
def test_the_node_rank_comes_from_the_launcher(environ, node):
    assert node_rank(environ) == node
