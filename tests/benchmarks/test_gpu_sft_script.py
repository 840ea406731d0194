"""scripts/gpu/sft.sh on CPU: DRY_RUN=1 prints the data command and the deepspeed sft.py command, each of which
passes its own parser's validation, and the RL launcher takes the SFT's export as its model (the two-line recipe)."""
import os
import shlex
import subprocess

import pytest

import rl.rollout.vllm.flags
from rl.config import parse_args as parse_train_args
from rl.sft.config import parse_args as parse_sft_args
from tests.helpers import REPO_ROOT

MODELS = {"qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct", "qwen3-4b": "Qwen/Qwen3-4B",
          "r1-distill-llama-8b": "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"}


def dry_run(script, *args, **env):
    return subprocess.run(["bash", f"scripts/gpu/{script}", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          env=dict(os.environ, DRY_RUN="1", **env), timeout=30)


@pytest.mark.parametrize("env_name", ["toolcall", "math", "mixed"])
@pytest.mark.parametrize("model", MODELS)
def test_the_sft_launcher_prints_commands_that_validate(env_name, model, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    assert f"output/sft_{env_name}_{model}" in dry_run("sft.sh", env_name, model).stdout  # the default folder
    out = tmp_path / "sft"
    out.mkdir()
    (out / "data.jsonl").write_text('{"prompt": "q", "completion": "a"}\n')  # what the data command writes
    proc = dry_run("sft.sh", env_name, model, "--seed", "3", OUTPUT=str(out))
    assert proc.returncode == 0, proc.stderr
    data_line, sft_line = proc.stdout.strip().splitlines()
    data = shlex.split(data_line)
    assert data[:3] == ["python", "-m", "rl.sft.warm_start_data"] and data[data.index("--env") + 1] == env_name
    words = shlex.split(sft_line)
    assert words[:3] == ["deepspeed", "--num_gpus", "8"]
    args = parse_sft_args(words[words.index("sft.py") + 1:])
    assert args.model_name_or_path == MODELS[model] and args.env == env_name and args.seed == 3  # extra flags win
    assert (args.dtype, args.actor_zero_stage, args.num_train_epochs) == ("bf16", 3, 2.0)
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * 8 == 64
    assert args.output_dir == str(out) and args.data_path == f"{out}/data.jsonl"


def test_rl_starts_from_the_sft_export(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(rl.rollout.vllm.flags, "vllm_unavailable_reason", lambda: None)
    final = tmp_path / "sft_toolcall_qwen2.5-1.5b" / "final"
    final.mkdir(parents=True)
    proc = dry_run("dara_toolcall.sh", "dara-asym", "qwen2.5-1.5b", MODEL_PATH=str(final))
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(proc.stdout)
    monkeypatch.setenv("WORLD_SIZE", "8")
    args = parse_train_args(words[words.index("train.py") + 1:])
    assert args.model_name_or_path == str(final) and not args.toolcall_example  # the prompt the SFT trained on


def test_bad_arguments_print_usage():
    proc = dry_run("sft.sh", "chess", "qwen3-4b")
    assert proc.returncode == 2 and "unknown ENV 'chess'" in proc.stderr and proc.stdout == ""
