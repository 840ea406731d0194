"""Flag checks the GPU runs depend on: hub model ids are not mistaken for missing folders, and what vLLM would refuse
at its first generate is refused when the flags are parsed."""
import os

import pytest

from rl.config import parse_args
from rl.engine.models import is_local_model_path


@pytest.mark.parametrize("value,local", [
    ("Qwen/Qwen3-4B", False),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", False),
    ("gpt2", False),
    ("./models/mine", True),
    ("../models/mine", True),
    ("~/models/mine", True),
    ("/models/mine", True),
    ("output/grpo_arith_smollm2/final", True),  # not the hub's org/name form: a folder, refused when missing
])
def test_hub_ids_and_local_paths_are_told_apart(value, local):
    assert is_local_model_path(value) is local


def test_a_missing_model_folder_under_an_existing_folder_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    os.makedirs("output")
    assert is_local_model_path("output/final")  # org/name in form, but output/ is a folder here
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model_name_or_path", "output/final", "--dtype", "fp32"])
    assert str(exc.value) == "train.py: error: --model_name_or_path output/final does not exist"


def test_an_existing_relative_folder_is_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.makedirs("org/model")
    assert is_local_model_path("org/model")


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen3-4B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"])
def test_launcher_default_hub_ids_pass_validation_without_the_network(hub_id):
    assert parse_args(["--model_name_or_path", hub_id]).model_name_or_path == hub_id


def test_a_missing_local_folder_is_refused_naming_the_flag(tmp_path, capsys):
    missing = str(tmp_path / "no_model")
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model_name_or_path", missing])
    assert f"--model_name_or_path {missing} does not exist" in str(exc.value)


def test_home_relative_model_paths_are_expanded(tmp_path, monkeypatch, tiny_model_dir):
    monkeypatch.setenv("HOME", os.path.dirname(tiny_model_dir))
    args = parse_args(["--model_name_or_path", "~/" + os.path.basename(tiny_model_dir)])
    assert args.model_name_or_path == tiny_model_dir


def test_reward_model_hub_id_is_accepted_and_a_missing_folder_refused(tiny_model_dir, tmp_path):
    base = ["--model_name_or_path", tiny_model_dir, "--algo", "maestro"]
    args = parse_args([*base, "--reward_model_name_or_path", "OpenAssistant/reward-model-deberta-v3-large-v2"])
    assert args.reward_model_name_or_path == "OpenAssistant/reward-model-deberta-v3-large-v2"
    with pytest.raises(SystemExit) as exc:
        parse_args([*base, "--reward_model_name_or_path", str(tmp_path / "no_rm")])
    assert "--reward_model_name_or_path" in str(exc.value) and "does not exist" in str(exc.value)


def test_vllm_temperature_above_two_is_refused_at_parse_time(tiny_model_dir):
    """Checked before vLLM's availability, so this machine (no CUDA, no vLLM) shows it too."""
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model_name_or_path", tiny_model_dir, "--rollout_backend", "vllm", "--temperature", "2.5"])
    assert "--temperature 2.5" in str(exc.value) and "vLLM" in str(exc.value)


def test_hf_rollouts_keep_temperatures_above_two(tiny_model_dir):
    assert parse_args(["--model_name_or_path", tiny_model_dir, "--temperature", "2.5"]).temperature == 2.5


def test_eval_py_takes_a_hub_id_and_refuses_a_missing_local_folder(tmp_path):
    import eval as eval_cli
    args = eval_cli.build_parser().parse_args(["--model_name_or_path", "Qwen/Qwen3-4B"])
    eval_cli.validate(args)  # a hub id is for transformers to resolve, not a path to check
    assert args.model_name_or_path == "Qwen/Qwen3-4B"
    missing = str(tmp_path / "no_such_model")
    with pytest.raises(SystemExit, match="does not exist"):
        eval_cli.validate(eval_cli.build_parser().parse_args(["--model_name_or_path", missing]))
