"""DeepSpeed-Chat's LoRA flags on credo's peft LoRA (rl/engine/lora.py): the aliases, --only_optimize_lora (which weights a
real ZeRO-3 step changes), --actor_lora_learning_rate (the adapters' own optimizer param group), and what the
reference and the export are when the base weights train too."""
import os

import pytest
import torch

from rl.config import parse_args
from rl.engine.lora import AdaptersOffReference, is_lora_param
from tests.helpers import one_rank_process_group

BASE = ["--env", "tests.fixture_envs:DigitFractionEnv", "--output_dir", "unused", "--actor_zero_stage", "3",
        "--num_generations", "2", "--per_device_generation_batch_size", "1", "--beta", "0.05"]


def flags(tiny_model_dir, *extra):
    return parse_args(["--model_name_or_path", tiny_model_dir, *BASE, *extra])


# --- parse time -----------------------------------------------------------------------------------------------

def test_deepspeed_chat_lora_names_set_the_same_flags_as_trl_names(tiny_model_dir):
    ds_chat = flags(tiny_model_dir, "--actor_lora_dim", "8", "--actor_lora_module_name", "q_proj,v_proj",
                    "--actor_lora_alpha", "32")
    trl = flags(tiny_model_dir, "--lora_r", "8", "--lora_target_modules", "q_proj,v_proj", "--lora_alpha", "32")
    picked = ("lora_r", "lora_target_modules", "lora_alpha", "only_optimize_lora", "actor_lora_learning_rate")
    assert {k: getattr(ds_chat, k) for k in picked} == {k: getattr(trl, k) for k in picked} == {
        "lora_r": 8, "lora_target_modules": "q_proj,v_proj", "lora_alpha": 32.0, "only_optimize_lora": True,
        "actor_lora_learning_rate": None}


def test_only_optimize_lora_is_the_default_and_can_be_turned_off(tiny_model_dir):
    assert flags(tiny_model_dir, "--lora_r", "4").only_optimize_lora
    assert flags(tiny_model_dir, "--lora_r", "4", "--only_optimize_lora").only_optimize_lora
    assert not flags(tiny_model_dir, "--lora_r", "4", "--no_only_optimize_lora").only_optimize_lora


@pytest.mark.parametrize("extra, message", [
    (["--actor_lora_learning_rate", "1e-3"], "--actor_lora_learning_rate without --lora_r"),
    (["--no_only_optimize_lora"], "--no_only_optimize_lora without --lora_r"),
    (["--lora_r", "4", "--actor_lora_learning_rate", "0"], "--actor_lora_learning_rate must be > 0"),
])
def test_lora_optimizer_flags_that_cannot_apply_are_refused_naming_the_flag(tiny_model_dir, extra, message):
    with pytest.raises(SystemExit, match=message):
        flags(tiny_model_dir, *extra)


# --- a real ZeRO-3 step ---------------------------------------------------------------------------------------

def full_weights(engine) -> dict:
    import deepspeed
    params = dict(engine.module.named_parameters())
    with deepspeed.zero.GatheredParameters(list(params.values())):
        return {n: p.detach().float().clone() for n, p in params.items()}


def trained(tiny_model_dir, *extra):
    """(args, actor, reference, weights before, weights after one optimizer step) on a one-rank ZeRO-3 actor."""
    from rl.engine.actor import EngineSettings, build_actor, build_reference
    args = flags(tiny_model_dir, *extra)
    settings = EngineSettings.from_args(args)
    actor = build_actor(settings, 1, 10)
    reference = build_reference(settings, 1, actor)
    before = full_weights(actor)
    torch.manual_seed(0)
    ids = torch.randint(4, 90, (2, 12))
    for _ in range(actor.gradient_accumulation_steps()):
        actor.backward(actor(input_ids=ids, labels=ids).loss)
        actor.step()
    return args, actor, reference, before, full_weights(actor)


def moved(before: dict, after: dict) -> dict:
    return {n: (after[n] - before[n]).abs().max().item() for n in before}


@pytest.fixture(scope="module")
def process_group():
    with one_rank_process_group():
        yield


@pytest.mark.slow
def test_with_only_optimize_lora_a_step_changes_the_adapters_and_no_base_weight(tiny_model_dir, process_group):
    _, actor, reference, before, after = trained(tiny_model_dir, "--lora_r", "4", "--actor_learning_rate", "1e-2")
    change = moved(before, after)
    assert all(change[n] > 0 for n in change if ".lora_B." in n)
    assert all(change[n] == 0 for n in change if not is_lora_param(n))
    assert isinstance(reference, AdaptersOffReference)  # the frozen base is the actor with its adapters off
    # without --actor_lora_learning_rate the adapters' group has the actor's learning rate (ZeRO drops the two empty
    # groups of the frozen base weights)
    assert [g["lr"] for g in actor.optimizer.param_groups] == [1e-2]


@pytest.mark.slow
def test_without_only_optimize_lora_the_base_weights_train_too_and_the_reference_is_a_copy(tiny_model_dir,
                                                                                           process_group, tmp_path):
    _, actor, reference, before, after = trained(tiny_model_dir, "--lora_r", "4", "--actor_learning_rate", "1e-2",
                                                 "--no_only_optimize_lora")
    change = moved(before, after)
    base = [n for n in change if not is_lora_param(n)]
    assert any("embed_tokens" in n for n in base) and any("norm" in n for n in base)
    assert all(change[n] > 0 for n in base), [n for n in base if change[n] == 0]  # embeddings, norms, projections
    assert all(change[n] > 0 for n in change if ".lora_B." in n)
    # the actor's base has moved, so "adapters off" is no longer the initial model: the reference is its own copy
    assert not isinstance(reference, AdaptersOffReference)
    assert not any(p.requires_grad for p in reference.module.parameters())
    # the export is the merged model; the adapter alone is not written, as it does not apply to the original base
    from rl.run.checkpoint import export_hf
    from rl.engine.models import load_tokenizer
    from safetensors.torch import load_file
    out = str(tmp_path / "final")
    export_hf(actor, load_tokenizer(tiny_model_dir), out)
    assert not os.path.exists(os.path.join(out, "adapter"))
    exported = load_file(os.path.join(out, "model.safetensors"))  # read as saved (ZeRO-3 is live in this process)
    assert torch.equal(exported["model.embed_tokens.weight"], after["base_model.model.model.embed_tokens.weight"])


@pytest.mark.slow
def test_the_lora_learning_rate_is_the_adapters_own_param_group(tiny_model_dir, process_group):
    # base weights at lr 1e-12, adapters at 1e-2: Adam's first step moves each weight by about its group's lr
    _, actor, _, before, after = trained(tiny_model_dir, "--lora_r", "4", "--no_only_optimize_lora",
                                         "--actor_learning_rate", "1e-12", "--actor_lora_learning_rate", "1e-2")
    lrs = [g["lr"] for g in actor.optimizer.param_groups]  # the base weights' group(s), then the adapters'
    assert lrs[-1] == 1e-2 and set(lrs[:-1]) == {1e-12} and actor.get_lr() == lrs
    change = moved(before, after)
    assert max(change[n] for n in change if not is_lora_param(n)) < 1e-10
    assert min(change[n] for n in change if ".lora_B." in n) > 1e-3

