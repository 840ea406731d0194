"""The typed config sections (EngineSettings, OutputSettings, ScoringSettings, DataSettings): each is read from the
parsed flags once, and the component it configures sees the flags' values through it."""
import dataclasses

import pytest
import torch

from rl.config import parse_args
from rl.rollout.data import DataSettings
from rl.engine.actor import EngineSettings, ds_config, hybrid_engine_config
from rl.run.start import OutputSettings
from rl.scoring import ScoringSettings


def test_deepspeed_config_follows_the_optimisation_and_system_flags(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--actor_learning_rate", "3e-6",
                       "--actor_weight_decay", "0.1", "--gradient_clipping", "0.5", "--actor_zero_stage", "3",
                       "--offload", "--per_device_generation_batch_size", "2", "--num_generations", "4",
                       "--per_device_train_micro_batch_size", "2"])
    settings = EngineSettings.from_args(args)
    train = ds_config(settings, world_size=2, dtype=torch.bfloat16, train=True)
    assert train["optimizer"]["params"]["lr"] == 3e-6
    assert train["optimizer"]["params"]["weight_decay"] == 0.1
    assert train["optimizer"]["params"]["torch_adam"] is False  # ZeRO-Offload needs DeepSpeedCPUAdam
    assert "fused" not in train["optimizer"]["params"]  # a torch AdamW argument DeepSpeedCPUAdam does not take
    on_device = ds_config(EngineSettings.from_args(parse_args(["--model_name_or_path", tiny_model_dir])),
                          world_size=1, dtype=torch.float32, train=True)["optimizer"]["params"]
    assert on_device["torch_adam"] is True and on_device["fused"] is True  # torch's one-kernel AdamW
    assert train["gradient_clipping"] == 0.5
    assert train["zero_optimization"]["stage"] == 3
    assert train["zero_optimization"]["offload_param"] == {"device": "cpu"}
    # one optimizer step per rollout batch: 2 prompts x 4 responses per rank, in micro-batches of 2
    assert (train["train_micro_batch_size_per_gpu"], train["gradient_accumulation_steps"],
            train["train_batch_size"]) == (2, 4, 16)
    assert train["bf16"]["enabled"] and not train["fp16"]["enabled"]
    reference = ds_config(settings, world_size=2, dtype=torch.bfloat16, train=False)
    assert "optimizer" not in reference and "offload_optimizer" not in reference["zero_optimization"]


def test_engine_settings_know_when_a_reference_is_needed(tiny_model_dir):
    base = ["--model_name_or_path", tiny_model_dir]
    assert not EngineSettings.from_args(parse_args(base)).uses_reference  # beta 0 by default
    assert EngineSettings.from_args(parse_args(base + ["--beta", "0.04"])).uses_reference
    with_lora = EngineSettings.from_args(parse_args(base + ["--lora_r", "4", "--lora_alpha", "8"]))
    assert (with_lora.lora.r, with_lora.lora.alpha) == (4, 8.0)


def test_sections_are_frozen(tiny_model_dir):
    settings = EngineSettings.from_args(parse_args(["--model_name_or_path", tiny_model_dir]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.learning_rate = 1.0


def test_hybrid_engine_block_covers_every_turn(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--max_turns", "3", "--max_answer_seq_len", "64"])
    block = hybrid_engine_config(EngineSettings.from_args(args))
    assert block["max_out_tokens"] == args.max_prompt_seq_len + 3 * 64 + 2 * 512


def test_output_settings_follow_the_save_flags(tiny_model_dir, tmp_path):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path), "--save_steps", "5",
                       "--save_total_limit", "1", "--no_final_export", "--report_to", "jsonl"])
    out = OutputSettings.from_args(args)
    assert (out.output_dir, out.save_steps, out.save_total_limit, out.final_export) == (str(tmp_path), 5, 1, False)
    assert out.tensorboard_path is None  # TensorBoard off where --report_to leaves it out


def test_output_settings_refuse_an_unresolved_output_dir(tiny_model_dir):
    with pytest.raises(ValueError, match="before start_run resolved --output_dir"):
        OutputSettings.from_args(parse_args(["--model_name_or_path", tiny_model_dir]))


def test_scoring_settings_take_a_methods_own_rewards(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--reward_funcs", "correctness,length"])
    assert ScoringSettings.from_args(args).reward_names == ("correctness", "length")
    own = ScoringSettings.from_args(args, ["fmt", "ppl", "length"])
    assert own.reward_names == ("fmt", "ppl", "length")
    # the in-process policy rewards and the env's verifier are not sent to the worker pool
    assert [spec.name for spec in own.reward_specs] == ["length"]


def test_data_settings_follow_the_data_flags(tiny_model_dir):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--num_train_samples", "7", "--seed", "3"])
    data = DataSettings.from_args(args)
    assert (data.env, data.data_path, data.num_train_samples, data.seed) == (args.env, None, 7, 3)
