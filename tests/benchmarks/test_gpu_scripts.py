"""The GPU launchers' argument handling, on CPU: every script parses, DRY_RUN=1 prints the deepspeed command a
deployment needs, and the command it prints passes train.py's own flag validation (`rl.config.parse_args`) for every
method, model (its default hub id) and deployment.

With `--rollout_backend vllm` (the launchers' default) validation ends by asking whether vLLM can run here; this
machine has neither CUDA nor vLLM, so those tests replace only that availability check, and one test shows that it
is the only thing refused here."""
import glob
import os
import shlex
import subprocess

import pytest

import rl.methods
import rl.rollout.vllm.flags
from rl.config import build_parser, parse_args
from tests.helpers import REPO_ROOT

METHODS = tuple(rl.methods.METHODS)  # every method, a new one included, goes through every launcher
MODELS = {"qwen3-4b": "Qwen/Qwen3-4B", "r1-distill-llama-8b": "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"}
DEPLOYMENTS = ("single_gpu", "single_node", "multi_node")


def dry_run(deployment, *args, **env):
    full_env = dict(os.environ, DRY_RUN="1", **env)
    return subprocess.run(["bash", f"scripts/gpu/{deployment}.sh", *args], cwd=REPO_ROOT, env=full_env,
                          capture_output=True, text=True, timeout=30)


def launcher_command(deployment, method, model, tmp_path, **env):
    """The train.py flags a launcher writes for METHOD MODEL (multi_node gets a two-node hostfile)."""
    if deployment == "multi_node":
        hostfile = tmp_path / "hostfile"
        hostfile.write_text("node-a slots=8\nnode-b slots=8\n")
        env["HOSTFILE"] = str(hostfile)
    proc = dry_run(deployment, method, model, **env)
    assert proc.returncode == 0, proc.stderr
    return train_argv(proc.stdout)[1]


def train_argv(stdout):
    words = shlex.split(stdout)
    assert words[0] == "deepspeed"
    i = words.index("train.py")
    return words[1:i], words[i + 1:]


@pytest.mark.parametrize("script", sorted(glob.glob(os.path.join(REPO_ROOT, "scripts", "**", "*.sh"), recursive=True)))
def test_every_shell_script_parses(script):
    assert subprocess.run(["bash", "-n", script], capture_output=True).returncode == 0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("model", MODELS)
def test_single_node_command_documents_the_run(method, model):
    proc = dry_run("single_node", method, model)
    assert proc.returncode == 0, proc.stderr
    launcher, argv = train_argv(proc.stdout)
    assert launcher[:2] == ["--num_gpus", "8"]
    args = build_parser().parse_args(argv)  # every flag written in the launcher exists in train.py
    assert args.algo == method and args.model_name_or_path == MODELS[model]
    assert args.dtype == "bf16" and args.actor_zero_stage == 3 and args.rollout_backend == "vllm"
    assert args.vllm_is_correction == "tis" and not args.offload
    assert args.output_dir == f"output/{method}_{model}_single_node"


def test_single_gpu_offloads_and_extra_flags_come_last_and_win():
    proc = dry_run("single_gpu", "grpo", "qwen3-4b", "--max_steps", "7")
    assert proc.returncode == 0, proc.stderr
    launcher, argv = train_argv(proc.stdout)
    assert launcher[:2] == ["--num_gpus", "1"]
    args = build_parser().parse_args(argv)
    assert args.offload and args.max_steps == 7


def test_environment_overrides_reach_the_command():
    proc = dry_run("single_node", "dara", "r1-distill-llama-8b", NUM_GPUS="4", LR="3e-6", ROLLOUT_BACKEND="hf")
    launcher, argv = train_argv(proc.stdout)
    args = build_parser().parse_args(argv)
    assert launcher[:2] == ["--num_gpus", "4"] and args.actor_learning_rate == 3e-6
    assert args.rollout_backend == "hf" and "--vllm_is_correction" not in argv


def test_multi_node_reads_the_hostfile(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("# cluster\nnode-a slots=8\nnode-b slots=8\n")
    proc = dry_run("multi_node", "tcpo", "r1-distill-llama-8b", HOSTFILE=str(hostfile), MASTER_ADDR="node-a")
    assert proc.returncode == 0, proc.stderr
    launcher, argv = train_argv(proc.stdout)
    assert launcher[:4] == ["--hostfile", str(hostfile), "--num_nodes", "2"]
    assert "--master_addr" in launcher and build_parser().parse_args(argv).max_turns == 3


def test_multi_node_without_a_hostfile_says_so(tmp_path):
    proc = dry_run("multi_node", "grpo", "qwen3-4b", HOSTFILE=str(tmp_path / "missing"))
    assert proc.returncode == 2 and "hostfile" in proc.stderr


@pytest.mark.parametrize("args,fragment", [((), "usage"), (("ppo", "qwen3-4b"), "unknown METHOD 'ppo'"),
                                           (("grpo", "llama-70b"), "unknown MODEL 'llama-70b'")])
def test_bad_arguments_print_usage_and_fail(args, fragment):
    proc = dry_run("single_gpu", *args)
    assert proc.returncode == 2 and fragment in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("model", MODELS)
def test_every_launcher_command_passes_validation(deployment, method, model, tmp_path, monkeypatch):
    """The launcher as shipped (vLLM rollouts, the default hub model id, MATH train); vLLM's availability assumed."""
    monkeypatch.chdir(REPO_ROOT)  # the launchers cd there; DATA is relative to it
    monkeypatch.setattr(rl.rollout.vllm.flags, "vllm_unavailable_reason", lambda: None)
    args = parse_args(launcher_command(deployment, method, model, tmp_path))
    assert args.algo == method and args.model_name_or_path == MODELS[model] and args.rollout_backend == "vllm"


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
@pytest.mark.parametrize("method", METHODS)
def test_every_launcher_command_passes_validation_with_hf_rollouts(deployment, method, tmp_path, monkeypatch):
    """ROLLOUT_BACKEND=hf needs nothing this machine lacks: the real validation, nothing replaced."""
    monkeypatch.chdir(REPO_ROOT)
    args = parse_args(launcher_command(deployment, method, "r1-distill-llama-8b", tmp_path, ROLLOUT_BACKEND="hf"))
    assert args.rollout_backend == "hf" and args.vllm_is_correction == "none"


def test_without_vllm_here_the_availability_check_is_the_only_refusal(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    reason = rl.rollout.vllm.flags.vllm_unavailable_reason()
    argv = launcher_command("single_node", "maestro", "qwen3-4b", tmp_path)
    if reason is None:  # a machine that can run vLLM
        parse_args(argv)
        return
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert str(exc.value) == f"train.py: error: {reason}"


# --- scripts/gpu/dara_toolcall.sh: DARA's tool-calling experiment (issue #48 item 7), one arm per call ---
TOOLCALL_ARMS = {"dara-asym": "dara", "gdpo": "gdpo", "grpo": "grpo", "dara-asym-think": "dara",
                 "gdpo-think": "gdpo", "grpo-think": "grpo"}


def toolcall_recipe(*args, **env):
    return subprocess.run(["bash", "scripts/gpu/dara_toolcall.sh", *args], cwd=REPO_ROOT,
                          env=dict(os.environ, DRY_RUN="1", **env), capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("arm", TOOLCALL_ARMS)
def test_dara_toolcall_recipe_passes_validation_for_every_arm(arm, monkeypatch):
    """GDPO's released tool-calling batch (512 prompts x 4 responses, mini-batches of 128) on the pre-registered
    rewards; vLLM's availability assumed as for the other launchers."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(rl.rollout.vllm.flags, "vllm_unavailable_reason", lambda: None)
    proc = toolcall_recipe(arm, "qwen2.5-1.5b", SEED="2")
    assert proc.returncode == 0, proc.stderr
    launcher, argv = train_argv(proc.stdout)
    monkeypatch.setenv("WORLD_SIZE", "8")  # as the deepspeed launcher sets it for each rank: mini-batches span ranks
    args = parse_args(argv)
    assert launcher[:2] == ["--num_gpus", "8"] and args.algo == TOOLCALL_ARMS[arm] and args.seed == 2
    rewards = ["tool_format", "tool_correct"] + (["think_length"] if arm.endswith("-think") else [])
    assert args.reward_funcs == rewards and args.env == "toolcall" and not args.toolcall_example
    assert (args.per_device_generation_batch_size * 8, args.num_generations, args.ppo_mini_batch_size) == (512, 4, 128)
    assert args.model_name_or_path == "Qwen/Qwen2.5-1.5B-Instruct" and args.actor_learning_rate == 1e-6
    assert args.max_prompt_seq_len == 4096 and args.max_answer_seq_len == 1024 and args.beta == 0
    assert not args.filter_groups and args.output_dir == f"output/dara_toolcall/{arm}_qwen2.5-1.5b_seed2"
    if arm.startswith("dara"):
        assert (args.dara_variant, args.dara_w_max) == ("asym", 5.0)


def test_dara_toolcall_recipe_on_one_gpu_with_the_summed_reward_filter(monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    proc = toolcall_recipe("gdpo", "qwen2.5-1.5b", NUM_GPUS="1", OFFLOAD="1", FILTER="1", ROLLOUT_BACKEND="hf")
    launcher, argv = train_argv(proc.stdout)
    args = parse_args(argv)  # nothing replaced: hf rollouts need nothing this machine lacks
    assert launcher[:2] == ["--num_gpus", "1"] and args.per_device_generation_batch_size == 512 and args.offload
    assert args.filter_groups and args.filter_groups_metric == "reward_sum"


@pytest.mark.parametrize("args,env,fragment", [(("ppo", "qwen2.5-1.5b"), {}, "unknown ARM 'ppo'"),
                                               (("gdpo", "llama-70b"), {}, "unknown MODEL 'llama-70b'"),
                                               (("gdpo", "qwen2.5-1.5b"), {"NUM_GPUS": "3"}, "not a multiple")])
def test_dara_toolcall_recipe_refuses_bad_arguments(args, env, fragment):
    proc = toolcall_recipe(*args, **env)
    assert proc.returncode == 2 and fragment in proc.stderr and proc.stdout == ""
