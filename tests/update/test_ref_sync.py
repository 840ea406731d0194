"""Reference-model sync (rl/update/ref_sync.py): TR-DPO's soft update as TRL applies it, on fixed tensors, on plain
modules, and on real ZeRO-3 engines (persistent and partitioned parameters); the refusals under --beta 0 and LoRA.
The exact resume of a synced reference is checked by tests/run/test_fault_tolerance.py: the session's shared 2-rank
run (tests/helpers.py ZERO3_TWO_RANK_RUN) syncs after step 2, where that test stops and resumes it."""
import copy

import pytest
import torch

from rl.update.ref_sync import ReferenceSync, RefSyncSettings, mix_


def test_mix_is_alpha_policy_plus_one_minus_alpha_reference():
    ref, policy = torch.tensor([1.0, -2.0, 0.5]), torch.tensor([3.0, 2.0, 0.5])
    mix_(ref, policy, 0.6)
    assert ref.tolist() == pytest.approx([0.6 * 3 + 0.4 * 1, 0.6 * 2 - 0.4 * 2, 0.5])
    half = torch.tensor([1.0], dtype=torch.bfloat16)
    mix_(half, torch.tensor([1.0078125], dtype=torch.bfloat16), 0.5)  # one bf16 ulp apart: rounded once
    assert half.dtype == torch.bfloat16 and half.item() in (1.0, 1.0078125)


def pair():
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    reference = copy.deepcopy(policy)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p))
    return policy, reference


def test_the_reference_moves_every_sync_steps_only():
    policy, reference = pair()
    initial = [p.detach().clone() for p in reference.parameters()]
    sync = ReferenceSync(RefSyncSettings(True, 0.25, 2), policy, reference)
    assert sync.after_step(1) == {"ref/synced": 0.0}
    assert all(torch.equal(a, b) for a, b in zip(initial, reference.parameters()))
    assert sync.after_step(2) == {"ref/synced": 1.0}
    for r0, r, p in zip(initial, reference.parameters(), policy.parameters()):
        torch.testing.assert_close(r.detach(), 0.25 * p.detach() + 0.75 * r0)
    sync.after_step(4)  # twice: ref = a p + (1 - a)(a p + (1 - a) r0)
    for r0, r, p in zip(initial, reference.parameters(), policy.parameters()):
        torch.testing.assert_close(r.detach(), 0.25 * p.detach() + 0.75 * (0.25 * p.detach() + 0.75 * r0))


def test_the_synced_reference_is_saved_and_restored():
    policy, reference = pair()
    sync = ReferenceSync(RefSyncSettings(True, 0.5, 1), policy, reference)
    sync.after_step(1)
    state = sync.state_dict()
    fresh_policy, fresh_reference = pair()
    ReferenceSync(RefSyncSettings(True, 0.5, 1), fresh_policy, fresh_reference).load_state_dict(state)
    for a, b in zip(reference.parameters(), fresh_reference.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="--sync_ref_model"):  # a checkpoint saved without syncing
        ReferenceSync(RefSyncSettings(True, 0.5, 1), fresh_policy, fresh_reference).load_state_dict({})
    off = ReferenceSync(RefSyncSettings(False, 0.5, 1), policy, reference)
    assert off.after_step(1) == {} and off.state_dict() == {}
    assert ReferenceSync(RefSyncSettings(True, 0.5, 1), policy, None).after_step(1) == {}


@pytest.mark.slow
@pytest.mark.parametrize("persistent", [True, False])
def test_zero3_engines_mix_and_restore_the_gathered_weights(tiny_model_dir, persistent):
    """Real ZeRO-3 engines in one process: with every parameter persistent (credo's one-rank knobs) and with every
    parameter partitioned and released between uses (the multi-rank knobs, persistence threshold 0: the tiny model's
    parameters are all under DeepSpeed-Chat's 1e4)."""
    import deepspeed
    from transformers import AutoModelForCausalLM

    from rl.engine.zero_config import MULTI_RANK_ZERO3, ONE_RANK_ZERO3
    from tests.helpers import one_rank_process_group

    def full(engine):
        out = {}
        for name, p in engine.module.named_parameters():
            with deepspeed.zero.GatheredParameters([p]):
                out[name] = p.detach().clone()
        return out

    zero = {"stage": 3, **(ONE_RANK_ZERO3 if persistent else {**MULTI_RANK_ZERO3,
                                                              "stage3_param_persistence_threshold": 0})}
    cfg = {"train_micro_batch_size_per_gpu": 1, "train_batch_size": 1, "zero_optimization": zero,
           "steps_per_print": 10 ** 9}
    with one_rank_process_group():
        models = [AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32) for _ in range(3)]
        with torch.no_grad():
            for p in models[0].parameters():
                p.add_(0.1)
        actor, *_ = deepspeed.initialize(model=models[0], config=cfg)
        reference, *_ = deepspeed.initialize(model=models[1], config=cfg)
        other, *_ = deepspeed.initialize(model=models[2], config=cfg)
        assert all(p.ds_persist == persistent for p in reference.module.parameters())
        before, policy = full(reference), full(actor)
        sync = ReferenceSync(RefSyncSettings(True, 0.6, 1), actor, reference)
        sync.after_step(1)
        after = full(reference)
        for name in before:
            torch.testing.assert_close(after[name], 0.6 * policy[name] + 0.4 * before[name])
        assert full(actor).keys() == policy.keys()
        assert all(torch.equal(full(actor)[n], policy[n]) for n in policy)  # the policy is only read
        # what a forward sees is the mixed weights too (the gathered copy a persistent parameter keeps)
        ids = torch.tensor([[5, 6, 7]])
        with torch.no_grad():
            ref_out = reference(input_ids=ids).logits
        ReferenceSync(RefSyncSettings(True, 0.6, 1), actor, other).load_state_dict(sync.state_dict())
        for name, value in full(other).items():
            assert torch.equal(value, after[name]), name
        with torch.no_grad():
            torch.testing.assert_close(other(input_ids=ids).logits, ref_out)


@pytest.mark.parametrize("argv, message", [
    (["--sync_ref_model"], "--beta 0 loads no reference"),
    (["--sync_ref_model", "--beta", "0.1", "--lora_r", "4"], "--sync_ref_model with --lora_r"),
    (["--beta", "0.1", "--sync_ref_model", "--ref_model_mixup_alpha", "1.5"], "--ref_model_mixup_alpha"),
    (["--beta", "0.1", "--sync_ref_model", "--ref_model_sync_steps", "0"], "--ref_model_sync_steps"),
])
def test_a_sync_without_a_reference_to_sync_is_refused_naming_the_flag(tiny_model_dir, argv, message):
    from rl.config import parse_args
    with pytest.raises(SystemExit, match=message):
        parse_args(["--model_name_or_path", tiny_model_dir, *argv])
    assert parse_args(["--model_name_or_path", tiny_model_dir, "--beta", "0.1", "--sync_ref_model"]).sync_ref_model
