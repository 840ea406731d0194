"""Two one-rank nodes on one machine, each started as a SLURM or Kubernetes job starts it (`NODE_RANK=K bash
scripts/gpu/multi_node.sh`), its process tree standing for its machine: tests/run/test_node_failures.py kills or
freezes one, tests/run/test_node_local_disks.py gives each a disk of its own."""
import os
import signal
import subprocess
import time

import psutil
import pytest

from tests.helpers import REPO_ROOT
from tests.run.test_multi_node import SCRIPT, script_env


def nodes_env(tmp_path, model_dir) -> dict:
    """multi_node.sh's environment for both nodes: its --cpu_dry_run's CPU-sized settings, a two-node hostfile,
    the master at 127.0.0.1 and a port of their own; the run far longer than a test waits (MAX_STEPS 500)."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-a slots=1\nnode-b slots=1\n")
    return script_env(tmp_path, model_dir, HOSTFILE=str(hostfile), MASTER_ADDR="127.0.0.1", MAX_STEPS="500",
                      ROLLOUT_BACKEND="hf", DTYPE="fp32", MAX_ANSWER="32", PROMPTS_PER_RANK="2", NUM_GENERATIONS="4")


def start_nodes(tmp_path, model_dir, flags, env_of_node=None, wrap_node=None):
    """Both nodes, each in a session of its own; returns ([(Popen, its output file)], OUTPUT). env_of_node(k): more
    environment for node k; wrap_node(k): a command that node k's script runs under (bwrap, for a disk of its own)."""
    env = nodes_env(tmp_path, model_dir)
    nodes = []
    for k in (0, 1):
        node_env = dict(env, NODE_RANK=str(k), **(env_of_node(k) if env_of_node else {}))
        out = open(tmp_path / f"node{k}.out", "w+")
        command = [*(wrap_node(k) if wrap_node else []), "bash", SCRIPT, "grpo", "qwen3-4b", *flags]
        nodes.append((subprocess.Popen(command, cwd=REPO_ROOT, env=node_env,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True), out))
    return nodes, env["OUTPUT"]


def wait_for(condition, timeout, nodes, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        if any(proc.poll() is not None for proc, _ in nodes):
            break
        time.sleep(0.25)
    stop(nodes)
    pytest.fail(f"{what} did not happen:\n" + "\n".join(output(n)[-3000:] for n in nodes))


def output(node) -> str:
    node[1].seek(0)
    return node[1].read()


def whole_node(node) -> list:
    """The node's script and every process below it (scripts/launch.py starts deepspeed in a session of its own, so
    the script's process group is not the whole node)."""
    try:
        root = psutil.Process(node[0].pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def signal_node(node, sig):
    for proc in whole_node(node):
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def stop(nodes):
    for node in nodes:
        signal_node(node, signal.SIGKILL)
        node[0].wait(timeout=60)
