"""The GPU rollout flags are refused at parse time on a machine that cannot honour them; the hybrid engine's
architecture check. Runs on CPU: CUDA and vLLM are faked where a test needs them present."""
import importlib.util

import pytest
import torch

from rl.config import parse_args
from rl.engine.actor import HYBRID_ENGINE_MODEL_TYPES, EngineSettings, hybrid_engine_config, hybrid_engine_supported


def refused(argv, model_dir, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model_name_or_path", model_dir, *argv])
    return str(exc.value) + capsys.readouterr().err


def test_defaults_keep_the_cpu_path(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir])
    assert args.rollout_backend == "hf" and args.vllm_is_correction == "none" and args.dist_timeout_minutes == 30


def test_vllm_on_a_machine_without_cuda_is_refused_naming_the_flag(tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    msg = refused(["--rollout_backend", "vllm"], tiny_model_dir, capsys)
    assert "--rollout_backend vllm needs CUDA" in msg and "--rollout_backend hf" in msg


def test_vllm_not_installed_is_refused_naming_the_gpu_requirements(tiny_model_dir, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real_find_spec(name, *a))
    msg = refused(["--rollout_backend", "vllm"], tiny_model_dir, capsys)
    assert "vllm package is not installed" in msg and "requirements-gpu.txt" in msg


def test_vllm_accepted_where_cuda_and_vllm_exist(tiny_model_dir, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "vllm" else real_find_spec(name, *a))
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--rollout_backend", "vllm",
                       "--vllm_is_correction", "tis"])
    assert args.vllm_is_cap == 2.0 and args.vllm_sleep_level == 2


def test_the_rollout_correction_runs_on_credos_decode_loop_which_records_the_samplers_log_probs(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--vllm_is_correction", "token_truncate"])
    assert args.rollout_backend == "hf" and args.decode_loop == "credo" and args.vllm_is_correction == "token_truncate"


@pytest.mark.parametrize("argv,fragment", [
    (["--vllm_is_correction", "tis", "--decode_loop", "hf_generate"], "--decode_loop hf_generate records none"),
    (["--vllm_is_correction", "token_mask", "--enable_hybrid_engine"], "--enable_hybrid_engine records none"),
    (["--vllm_is_correction", "tis", "--vllm_is_cap", "0"], "--vllm_is_cap must be > 0"),
    (["--dist_timeout_minutes", "0"], "--dist_timeout_minutes"),
    (["--rollout_backend", "vllm", "--vllm_gpu_memory_utilization", "1.5"], "--vllm_gpu_memory_utilization"),
    (["--rollout_backend", "vllm", "--vllm_tensor_parallel_size", "2", "--max_turns", "2"], "lockstep"),
    (["--rollout_backend", "vllm", "--enable_hybrid_engine"], "pick one"),
    (["--rollout_backend", "vllm", "--vllm_is_cap", "0"], "--vllm_is_cap"),
])
def test_bad_gpu_flag_combinations_are_refused(argv, fragment, tiny_model_dir, capsys):
    assert fragment in refused(argv, tiny_model_dir, capsys)


@pytest.mark.parametrize("model_type,rope,ok", [
    ("llama", None, False),                                      # tuple for tensor, no num_kv (rl/engine/actor.py)
    ("llama", {"rope_type": "default", "rope_theta": 1e4}, False),
    ("llama", {"rope_type": "llama3", "factor": 8.0}, False),   # DeepSeek-R1-Distill-Llama-8B
    ("qwen3", None, False),                                      # Qwen3-4B: no DeepSpeed inference container
    ("qwen2", None, False),
    ("opt", None, False),                                        # skipped by DeepSpeed 0.19.8 for transformers 5.x
    ("gpt_neox", None, False),
    ("gptj", None, True),
])
def test_hybrid_engine_support_follows_deepspeeds_containers(model_type, rope, ok):
    supported, why = hybrid_engine_supported(model_type, rope)
    assert supported is ok
    assert (why == "") is ok


def test_hybrid_engine_block_is_valid_deepspeed_config(tiny_model_dir):
    from deepspeed.runtime.config import HybridEngineConfig
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--max_turns", "2"])
    block = hybrid_engine_config(EngineSettings.from_args(args))
    parsed = HybridEngineConfig(**block)
    assert parsed.enabled and parsed.max_out_tokens == args.max_prompt_seq_len + 2 * args.max_answer_seq_len + 512
    assert "gptj" in HYBRID_ENGINE_MODEL_TYPES
