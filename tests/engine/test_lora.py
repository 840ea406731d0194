"""LoRA through peft (rl/engine/lora.py): flags refused at parse time, only adapters train, the reference is the base with
adapters off, the merged export equals the adapter on the base, and a resumed LoRA run continues exactly."""
import os

import pytest
import torch

from rl.config import parse_args
from rl.engine.lora import LoraSettings, merged_state_dict, wrap_with_lora
from rl.log.loggers import read_metrics
from tests.helpers import default_args, rewind_run, run_train

LORA_RUN = ["--env", "tests.fixture_envs:DigitFractionEnv", "--num_generations", "4",
            "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "12", "--temperature", "1.0",
            "--actor_learning_rate", "1e-2", "--num_train_samples", "200", "--actor_zero_stage", "3",
            "--lora_r", "4", "--lora_alpha", "8", "--beta", "0.05"]


def tiny(path):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(path)


def assert_ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-3000:]}"


# --- parse time -----------------------------------------------------------------------------------------------

def test_lora_with_the_vllm_backend_is_refused_because_the_sync_sends_base_weights(tiny_model_dir):
    with pytest.raises(SystemExit, match="--lora_r > 0 with --rollout_backend vllm"):
        parse_args(["--model_name_or_path", tiny_model_dir, "--lora_r", "8", "--rollout_backend", "vllm"])


def test_lora_with_the_hybrid_engine_is_refused(tiny_model_dir):
    with pytest.raises(SystemExit, match="--enable_hybrid_engine"):
        parse_args(["--model_name_or_path", tiny_model_dir, "--lora_r", "8", "--enable_hybrid_engine"])


@pytest.mark.parametrize("flags, message", [(["--lora_r", "-1"], "--lora_r must be >= 0"),
                                            (["--lora_r", "4", "--lora_alpha", "0"], "--lora_alpha must be > 0"),
                                            (["--lora_r", "4", "--lora_dropout", "1"], "--lora_dropout must be in"),
                                            (["--lora_r", "4", "--lora_target_modules", ","], "is empty")])
def test_bad_lora_values_are_refused_naming_the_flag(tiny_model_dir, flags, message):
    with pytest.raises(SystemExit, match=message):
        parse_args(["--model_name_or_path", tiny_model_dir, *flags])


def test_a_target_module_the_model_lacks_is_refused_naming_the_flag(tiny_model_dir):
    args = default_args(lora_r=4, lora_target_modules="q_proj,no_such_proj")
    missing = LoraSettings.from_args(default_args(lora_r=4, lora_target_modules="no_such_proj"))
    with pytest.raises(SystemExit, match="--lora_target_modules no_such_proj"):
        wrap_with_lora(tiny(tiny_model_dir), missing)
    # peft accepts a list naming one existing module
    assert wrap_with_lora(tiny(tiny_model_dir), LoraSettings.from_args(args)) is not None


# --- in process -----------------------------------------------------------------------------------------------

def test_only_adapter_parameters_are_trainable(tiny_model_dir):
    model = wrap_with_lora(tiny(tiny_model_dir), LoraSettings.from_args(default_args(lora_r=4)))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # all-linear: every projection of every layer, never the (tied) output head
    assert len(trainable) == 2 * 2 * 7
    assert not any("lm_head" in n or "embed" in n for n in trainable)


def test_merged_export_state_equals_the_adapter_applied_to_the_base(tiny_model_dir):
    torch.manual_seed(0)
    model = wrap_with_lora(tiny(tiny_model_dir), LoraSettings.from_args(default_args(lora_r=4, lora_alpha=8.0)))
    with torch.no_grad():  # a trained adapter: lora_B starts at zero, which would merge to the base itself
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.1)
    merged = tiny(tiny_model_dir)
    missing, unexpected = merged.load_state_dict(merged_state_dict(model, model.state_dict()), strict=False)
    assert unexpected == [] and missing in ([], ["lm_head.weight"])  # the head is tied to the embedding
    ids = torch.randint(4, 90, (2, 16))
    with torch.no_grad():
        expected, got, base = model(ids).logits, merged(ids).logits, tiny(tiny_model_dir)(ids).logits
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(got, base, atol=1e-3)  # the adapters are in the merged weights


# --- real launcher runs ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lora_run(tiny_model_dir, tmp_path_factory):
    """The 2-rank ZeRO-3 LoRA run every launcher test reads; --save_steps 2 leaves the step-2 checkpoint that the
    resume test continues from."""
    out = str(tmp_path_factory.mktemp("lora_zero3"))
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--max_steps", "3",
                      "--save_steps", "2", *LORA_RUN], num_ranks=2)
    assert_ok(proc)
    return out


@pytest.mark.slow
def test_lora_run_trains_the_adapters_and_leaves_the_base_weights_untouched(lora_run, tiny_model_dir):
    from peft import PeftModel
    base = tiny(tiny_model_dir).state_dict()
    exported = tiny(os.path.join(lora_run, "final")).state_dict()
    adapted = [k for k in base if not torch.equal(base[k], exported[k])]
    assert adapted and all(k.endswith("_proj.weight") for k in adapted)  # embeddings and norms are the base's
    on_base = PeftModel.from_pretrained(tiny(tiny_model_dir), os.path.join(lora_run, "final", "adapter"))
    lora_b = [p for n, p in on_base.named_parameters() if ".lora_B." in n]
    assert all(p.abs().max() > 0 for p in lora_b)  # peft starts B at 0: every adapter was trained
    # The export is the adapter applied to the *untouched* base: a base weight that had moved would not match.
    rebuilt = on_base.merge_and_unload().state_dict()
    for k in base:
        assert torch.allclose(rebuilt[k], exported[k], atol=1e-6), k


@pytest.mark.slow
def test_lora_reference_is_the_base_model_with_adapters_off(lora_run):
    rows = read_metrics(os.path.join(lora_run, "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3]
    # step 1: B = 0, so the policy is the base and the KL to the reference is exactly 0; then the adapters move
    # the policy away from the reference (were the reference the actor with its adapters, it would stay 0).
    assert rows[0]["actor/kl"] == 0.0
    assert rows[1]["actor/kl"] > 0 and rows[2]["actor/kl"] > 0


@pytest.mark.slow
def test_a_resumed_lora_run_continues_as_the_uninterrupted_run(lora_run, tiny_model_dir, tmp_path):
    # The uninterrupted run's folder as a run stopped after step 2's checkpoint leaves it (step 3's checkpoint,
    # metrics line and export removed): relaunched with the same flags, it resumes from the 2-rank ZeRO-3 LoRA
    # checkpoint and trains step 3 again. (Stopping by --test_stop_step and resuming is test_fault_tolerance's.)
    out = rewind_run(lora_run, str(tmp_path / "resumed"), 2)
    assert [r["step"] for r in read_metrics(os.path.join(out, "metrics.jsonl"))] == [1, 2]
    second = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--max_steps", "3",
                        "--save_steps", "2", *LORA_RUN], num_ranks=2)
    assert_ok(second)
    assert "resumed from" in second.stdout and "at step 2" in second.stdout
    resumed = read_metrics(os.path.join(out, "metrics.jsonl"))
    straight = read_metrics(os.path.join(lora_run, "metrics.jsonl"))
    assert [r["step"] for r in resumed] == [1, 2, 3]
    for key in ("reward/mean", "actor/loss", "actor/kl", "actor/grad_norm"):
        assert resumed[2][key] == pytest.approx(straight[2][key], rel=1e-5, abs=1e-7), key
    a, b = tiny(os.path.join(out, "final")).state_dict(), tiny(os.path.join(lora_run, "final")).state_dict()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
