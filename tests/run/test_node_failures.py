"""A node that dies, on one machine: two one-rank nodes, each started as a SLURM or Kubernetes job starts it
(`NODE_RANK=K bash scripts/gpu/multi_node.sh`, its process tree standing for its machine), then one node is
killed, frozen, or loses its launch process mid-run. The other node must end within a bounded time (not the
collective timeout, 10 minutes here) naming the lost node and the checkpoint to resume, and what was saved must
stay complete (#62 items 5 and 9).

Why each: SIGKILL to a node's processes is a crash whose kernel survives (connections reset, gloo fails at
once); SIGSTOP is a node that freezes or drops off the network (nothing is reset: only the heartbeat sees it); a
SIGKILLed per-node launch process is the case where `deepspeed` exits 0 (scripts/launch.py makes it 1)."""
import os
import signal
import time

import psutil
import pytest

from rl.log.loggers import read_metrics
from rl.run.checkpoint import checkpoint_root, complete_checkpoints, latest_checkpoint
from rl.run.launch_ranks import LAUNCH_MODULE
from rl.run.manifest import read_manifest, verify_checkpoint
from tests.run.test_multi_node import TINY_FLAGS
from tests.run.two_nodes import output, signal_node, start_nodes, stop, wait_for

pytestmark = pytest.mark.slow
HEARTBEAT_S = 10
# a checkpoint every step, so that a kill often lands in a save; the collective timeout far beyond the heartbeat's
FLAGS = [*TINY_FLAGS, "--save_steps", "1", "--no_final_export", "--heartbeat_timeout_s", str(HEARTBEAT_S)]


def trained_past_a_checkpoint(out):
    metrics = os.path.join(out, "metrics.jsonl")
    return lambda: latest_checkpoint(checkpoint_root(out)) is not None and os.path.exists(metrics) and \
        len(read_metrics(metrics)) >= 3


def assert_saved_checkpoints_intact(out) -> str:
    root = checkpoint_root(out)
    latest = latest_checkpoint(root)
    assert latest is not None
    for tag in complete_checkpoints(root):  # a save cut short leaves a .tmp-step_N, never a bad step_N
        verify_checkpoint(os.path.join(root, tag), read_manifest(os.path.join(root, tag)))
    return os.path.join(root, latest)


def launch_process(node) -> psutil.Process:
    found = [p for p in psutil.Process(node[0].pid).children(recursive=True) if LAUNCH_MODULE in " ".join(p.cmdline())]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("how", ["killed", "frozen"])
def test_a_lost_node_ends_the_other_within_the_heartbeat_naming_it_and_the_checkpoint(tiny_model_dir, tmp_path, how):
    nodes, out = start_nodes(tmp_path, tiny_model_dir, FLAGS)
    wait_for(trained_past_a_checkpoint(out), 240, nodes, "two nodes training past a checkpoint")
    lost_at = time.time()
    signal_node(nodes[1], signal.SIGKILL if how == "killed" else signal.SIGSTOP)
    try:
        nodes[0][0].wait(timeout=HEARTBEAT_S + 50)
        took = time.time() - lost_at
    finally:
        stop(nodes)
    said = output(nodes[0])
    assert nodes[0][0].returncode != 0, said[-3000:]
    # measured: killed ~10 s (gloo's error at once, then 3 missed beats of 2 s), frozen ~10 s (the heartbeat), against
    # the collective timeout's 10 minutes here (30 by default)
    assert took < HEARTBEAT_S + 30, (took, said[-3000:])
    assert "rank 1 (node 1, host " in said and "stopped answering" in said, said[-3000:]
    resume_from = assert_saved_checkpoints_intact(out)
    assert f"the last complete checkpoint is {resume_from}" in said, said[-3000:]


# alone: under the parallel phase's load (2 workers, each with multi-process launches) the fresh-clone CI of 8d36fc9
# once saw the survivor stopped by the heartbeat (a collective failed as rank 1 ended) instead of the collective stop;
# it passed alone and at one thread. Whether a loaded node can lose that clean stop is open (noted in issue #62's
# follow-up), not hidden: the test still asserts the clean stop.
@pytest.mark.serial
def test_a_killed_launch_process_fails_its_node_and_both_nodes_save(tiny_model_dir, tmp_path):
    """#62 item 9: node 1's DeepSpeed launch process is SIGKILLed. Its rank stops by itself (stop_with_launcher:
    finish the step, save), the save being collective the other node saves and stops with it, and node 1's launcher
    (scripts/launch.py, which multi_node.sh runs per node) exits 1 naming the rank: `deepspeed` alone exited 0."""
    nodes, out = start_nodes(tmp_path, tiny_model_dir, FLAGS)
    wait_for(trained_past_a_checkpoint(out), 240, nodes, "two nodes training past a checkpoint")
    launch = launch_process(nodes[1])
    rank = launch.children()[0]
    launch.kill()
    try:
        for proc, _ in nodes:
            proc.wait(timeout=120)
    finally:
        stop(nodes)
    lost, survivor = output(nodes[1]), output(nodes[0])
    assert nodes[1][0].returncode == 1, lost[-3000:]
    assert f"launch.py: error: DeepSpeed's launch process ended while rank 1 (pid {rank.pid}) kept running" in lost
    assert not rank.is_running()
    step = read_metrics(os.path.join(out, "metrics.jsonl"))[-1]["step"]
    assert f"stopped by a signal on another rank after step {step}; checkpoint saved" in survivor, survivor[-3000:]
    assert assert_saved_checkpoints_intact(out).endswith(f"step_{step}")
