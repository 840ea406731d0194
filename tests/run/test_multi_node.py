"""More than one node, shown on one machine: `scripts/gpu/multi_node.sh --cpu_dry_run` starts train.py as two nodes
of one rank each (two DeepSpeed launcher agents, `deepspeed --hostfile H --no_ssh --node_rank K`, meeting over TCP
at 127.0.0.1, gloo, no shared-memory allreduce since LOCAL_SIZE is 1), and its per-step metrics, checkpoint and
exported weights are those of one node with two ranks under `deepspeed --num_gpus 2` running the same train.py flags.

Why DeepSpeed's launcher in --no_ssh mode and not torchrun: it is the launcher credo's scripts use and the one whose
environment variables (LOCAL_SIZE, CROSS_RANK) DeepSpeed's CPU comm reads; its per-node command (`python -m
deepspeed.launcher.launch --world_info .. --node_rank K`) is the one the pdsh runner sends to each node over ssh,
and the one a SLURM or Kubernetes job runs on each node itself (one agent per node; credo's reading of "what a
multi-node launch most resembles", ssh being the part a single machine cannot show)."""
import concurrent.futures
import json
import os
import shlex
import signal
import subprocess

import pytest
import torch

from envs.arith import make_arith_split
from rl.config import build_parser
from rl.log.loggers import read_metrics
from tests.helpers import REPO_ROOT, free_port, run_train
from rl.log.step_metrics import CLOCK_METRICS

SCRIPT = os.path.join(REPO_ROOT, "scripts", "gpu", "multi_node.sh")
# A random tiny model scores ~0 on MATH; the digit-fraction verifier gives every group a spread, so the step moves
# the weights and step 2's metrics depend on step 1's update having been the same.
TINY_FLAGS = ["--env", "tests.fixture_envs:DigitFractionEnv", "--prompt_key", "prompt", "--max_answer_seq_len", "12",
              "--actor_learning_rate", "1e-2", "--dist_timeout_minutes", "10"]
# Differ between any two runs: wall-clock times and what is derived from them.
TIMING_PREFIXES = CLOCK_METRICS


def script_env(tmp_path, model_dir, **extra):
    data = tmp_path / "arith.jsonl"
    if not data.exists():  # the env's own rows as a --data_path file (the recipe trains on a file: DATA=)
        data.write_text("".join(json.dumps(row) + "\n" for row in make_arith_split("train", 64, seed=0)))
    env = {k: v for k, v in os.environ.items() if k not in ("DRY_RUN", "HOSTFILE", "NODE_RANK", "MASTER_ADDR")}
    # One thread per rank in both runs, so that the two runs do the same arithmetic (the dry run's own default,
    # cores / ranks, would differ from run_train's on a machine with more cores).
    env.update(MODEL_PATH=model_dir, DATA=str(data), OUTPUT=str(tmp_path / "two_nodes"), PORT=str(free_port()),
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=REPO_ROOT)
    env.update(extra)
    return env


def node_commands(env, *flags):
    """The per-node deepspeed commands the dry run would start: [(launcher args, train.py args)] per node."""
    proc = subprocess.run(["bash", SCRIPT, "--cpu_dry_run", "grpo", "qwen3-4b", *flags], cwd=REPO_ROOT,
                          env=dict(env, DRY_RUN="1"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    commands = []
    for line in proc.stdout.splitlines():
        words = shlex.split(line)
        assert words[:2] == ["python", "scripts/launch.py"], line  # each node under credo's launcher (item 9, #62)
        i = words.index("train.py")
        commands.append((words[2:i], words[i + 1:]))
    return commands


def option(words, name):
    return words[words.index(name) + 1]


def test_cpu_dry_run_starts_one_no_ssh_launcher_per_node_meeting_at_localhost(tmp_path):
    model_dir = str(tmp_path / "model")  # printed, not loaded
    commands = node_commands(script_env(tmp_path, model_dir), *TINY_FLAGS)
    assert len(commands) == 2
    for node_rank, (launcher, _) in enumerate(commands):
        assert "--no_ssh" in launcher and option(launcher, "--node_rank") == str(node_rank)
        assert option(launcher, "--master_addr") == "127.0.0.1" and option(launcher, "--num_nodes") == "2"
    assert len({option(launcher, "--master_port") for launcher, _ in commands}) == 1   # one rendezvous
    assert len({option(launcher, "--hostfile") for launcher, _ in commands}) == 1
    assert commands[0][1] == commands[1][1]  # every node runs the same train.py flags
    args = build_parser().parse_args(commands[0][1])
    assert args.algo == "grpo" and args.model_name_or_path == model_dir and args.rollout_backend == "hf"
    assert args.dtype == "fp32" and args.max_steps == 2 and args.env == "tests.fixture_envs:DigitFractionEnv"


@pytest.mark.parametrize("env,fragment", [
    (dict(NODE_RANK="1"), "NODE_RANK=1 needs MASTER_ADDR="),
    (dict(NODE_RANK="2", MASTER_ADDR="node-a"), "NODE_RANK=2 is not a node of"),
    (dict(NODE_RANK="first", MASTER_ADDR="node-a"), "NODE_RANK=first is not a node of"),
])
def test_a_node_launch_without_a_usable_rank_or_master_is_refused(tmp_path, env, fragment):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-a slots=8\nnode-b slots=8\n")
    proc = subprocess.run(["bash", SCRIPT, "grpo", "qwen3-4b"], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, DRY_RUN="1", HOSTFILE=str(hostfile), **env), timeout=30)
    assert proc.returncode == 2 and fragment in proc.stderr and proc.stdout == ""


def test_node_rank_mode_logs_each_node_to_its_own_file_and_passes_no_ssh(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-a slots=8\nnode-b slots=8\n")
    proc = subprocess.run(["bash", SCRIPT, "grpo", "qwen3-4b"], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, DRY_RUN="1", HOSTFILE=str(hostfile), NODE_RANK="1",
                                   MASTER_ADDR="node-a"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    assert words[:2] == ["python", "scripts/launch.py"]
    launcher = words[2:words.index("train.py")]
    assert launcher[launcher.index("--node_rank") - 1] == "--no_ssh" and option(launcher, "--node_rank") == "1"
    assert option(launcher, "--master_addr") == "node-a"


# --- the two runs ---------------------------------------------------------------------------------------------

def run_dry_run(env, *flags, timeout=1800):
    """The CPU dry run for real; on a timeout, SIGTERM lets the script stop its nodes before the test fails."""
    proc = subprocess.Popen(["bash", SCRIPT, "--cpu_dry_run", "grpo", "qwen3-4b", *flags], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f"the two-node dry run did not finish in {timeout} s:\n{out[-4000:]}")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-6000:]}"
    return out


@pytest.fixture(scope="module")
def two_nodes_and_one_node(tiny_model_dir, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("multi_node")
    env = script_env(tmp_path, tiny_model_dir)
    (_, train_args), _ = node_commands(env, *TINY_FLAGS)
    one_node = str(tmp_path / "one_node")
    # Side by side: on a loaded machine the two runs take half the wall time together (their results do not depend
    # on timing: fixed seeds, one thread per rank).
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        baseline = pool.submit(run_train, [*train_args, "--output_dir", one_node], num_ranks=2, timeout=1800)
        run_dry_run(env, *TINY_FLAGS)
        proc = baseline.result()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return env["OUTPUT"], one_node


@pytest.mark.slow
def test_two_nodes_of_one_rank_give_the_metrics_of_one_node_with_two_ranks(two_nodes_and_one_node):
    two_nodes, one_node = two_nodes_and_one_node
    rows2, rows1 = read_metrics(os.path.join(two_nodes, "metrics.jsonl")), read_metrics(
        os.path.join(one_node, "metrics.jsonl"))
    assert [r["step"] for r in rows2] == [r["step"] for r in rows1] == [1, 2]
    for row2, row1 in zip(rows2, rows1):
        assert set(row2) == set(row1)
        compared = [k for k in row1 if not k.startswith(TIMING_PREFIXES)]
        assert len(compared) > 20 and "reward/mean" in compared and "actor/grad_norm" in compared
        for key in compared:
            assert row2[key] == pytest.approx(row1[key], rel=1e-5, abs=1e-7), (row1["step"], key)
        assert row1["actor/grad_norm"] > 0 and row1["reward/std"] > 0  # a real update, not an idle step
    # the run was indeed two nodes of one rank each, and the baseline one node of two
    assert json.load(open(os.path.join(two_nodes, "config.json")))["world_size"] == 2


@pytest.mark.slow
def test_two_nodes_export_the_weights_of_one_node_with_two_ranks(two_nodes_and_one_node, tiny_model_dir):
    from transformers import AutoModelForCausalLM
    two_nodes, one_node = two_nodes_and_one_node
    load = lambda path: AutoModelForCausalLM.from_pretrained(path).state_dict()  # noqa: E731
    initial = load(tiny_model_dir)
    two, one = load(os.path.join(two_nodes, "final")), load(os.path.join(one_node, "final"))
    assert two.keys() == one.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    assert any(not torch.equal(initial[name], one[name]) for name in one)  # the two steps moved the weights


@pytest.mark.slow
def test_every_rank_of_both_nodes_writes_into_one_checkpoint(two_nodes_and_one_node):
    two_nodes = two_nodes_and_one_node[0]
    root = os.path.join(two_nodes, "checkpoints")
    assert open(os.path.join(root, "latest")).read().strip() == "step_2"
    files = set(os.listdir(os.path.join(root, "step_2")))
    # global ranks 0 and 1, although each is local rank 0 of its node
    assert {"rng_rank0.pt", "rng_rank1.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
            "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= files
    manifest = json.load(open(os.path.join(root, "step_2", "manifest.json")))
    assert manifest["world_size"] == 2 and set(manifest["files"]) == files - {"manifest.json"}
    state = torch.load(os.path.join(root, "step_2", "zero_pp_rank_0_mp_rank_00_model_states.pt"), weights_only=False)
    # data sharded by global rank: 2 steps x 2 ranks x 2 prompts per rank consumed
    assert state["trainer_state"]["data"]["position"] == 2 * 2 * 2


@pytest.mark.slow
def test_each_node_logs_its_own_launcher_to_the_output_folder(two_nodes_and_one_node):
    two_nodes = two_nodes_and_one_node[0]
    for node_rank in (0, 1):
        log = open(os.path.join(two_nodes, f"training.node{node_rank}.log")).read()
        assert f"--node_rank {node_rank}" in log.splitlines()[0]
        assert f"nnodes=2, num_local_procs=1, node_rank={node_rank}" in log
    assert "step 2 |" in open(os.path.join(two_nodes, "training.node0.log")).read()  # rank 0 prints the steps
