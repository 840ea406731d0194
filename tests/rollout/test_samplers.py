"""rl/rollout/samplers.py: the factory picks the sampler the flags name, the hybrid engine is told by its DeepSpeed class,
and an idle rank joins (or skips) the others' generate as lockstep requires."""
import argparse
from types import SimpleNamespace

import pytest
import torch
from deepspeed.runtime.hybrid_engine import DeepSpeedHybridEngine

from rl.engine.actor import hybrid_engine_active
from rl.rollout.samplers import (DecodeLoopSampler, HFGenerateSampler, HybridEngineSampler, SamplerSettings,
                                 SamplingSettings, VLLMSampler, make_sampler, sampler_class)


def flags(**overrides):
    values = dict(rollout_backend="hf", decode_loop="credo", enable_hybrid_engine=False, max_answer_seq_len=6,
                  temperature=0.7, top_k=0, top_p=1.0)
    values.update(overrides)
    return argparse.Namespace(**values)


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.5, pad_token_id=0,
                         eos_token_id=63)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


TOKENIZER = SimpleNamespace(pad_token_id=0, eos_token_id=63)  # what a sampler reads of a tokenizer


@pytest.mark.parametrize("overrides,expected", [
    ({}, DecodeLoopSampler),
    ({"decode_loop": "hf_generate"}, HFGenerateSampler),
    ({"rollout_backend": "vllm"}, VLLMSampler),
    # the flag alone does not make a hybrid engine: build_actor falls back off CUDA, and the decode loop applies
    ({"enable_hybrid_engine": True}, DecodeLoopSampler),
])
def test_the_flags_pick_the_sampler(overrides, expected):
    args = flags(**overrides)
    settings = SamplerSettings(SamplingSettings.from_args(args), backend=args.rollout_backend,
                               decode_loop=args.decode_loop)  # vLLM's own settings are not needed to pick it
    assert sampler_class(settings, tiny_llama()) is expected


def test_deepspeeds_hybrid_engine_generates_through_hf_generate_whatever_the_decode_loop():
    engine = object.__new__(DeepSpeedHybridEngine)  # the class is what counts (its kernels are CUDA-only)
    assert hybrid_engine_active(engine)
    assert sampler_class(SamplerSettings.from_args(flags(decode_loop="credo", enable_hybrid_engine=True)), engine) is HybridEngineSampler


def test_a_module_merely_named_DeepSpeedHybridEngine_is_not_the_hybrid_engine():
    look_alike = type("DeepSpeedHybridEngine", (torch.nn.Module,), {"generate": lambda self, **kw: None})()
    assert not hybrid_engine_active(look_alike)
    assert sampler_class(SamplerSettings.from_args(flags()), look_alike) is DecodeLoopSampler


def test_settings_are_read_from_the_flags():
    assert SamplingSettings.from_args(flags(top_k=5, top_p=0.9)) == SamplingSettings(6, 0.7, 5, 0.9,
                                                                                    packed_weights=True)


@pytest.mark.parametrize("loop", ["credo", "hf_generate"])
def test_a_fixed_seed_gives_the_same_sampled_tokens_as_the_decode_code_itself(loop):
    """A sampler adds no randomness of its own: under one seed it draws what rl/rollout/decode.py (or HF generate) draws."""
    from rl.rollout.decode import sample_batch
    from rl.rollout.tokens import left_pad, response_mask_from_ids
    model = tiny_llama()
    contexts = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    sampler = make_sampler(SamplerSettings.from_args(flags(decode_loop=loop)), model, TOKENIZER)
    torch.manual_seed(1)
    got, logps = sampler.generate(contexts, timings={})
    assert sampler.eos_ids == [63]
    ids, mask = left_pad(contexts, 0, "cpu")
    torch.manual_seed(1)
    if loop == "credo":
        want = sample_batch(model, ids, mask, 6, [63], 0.7)
    else:
        new = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=0.7, top_p=1.0,
                             top_k=None, max_new_tokens=6, pad_token_id=0, eos_token_id=[63])[:, ids.shape[1]:]
        keep = response_mask_from_ids(new, [63]).sum(-1).long().tolist()
        want = [new[i, :keep[i]].tolist() for i in range(len(contexts))]
    assert got == want and logps is None


def test_an_idle_rank_in_lockstep_joins_the_generate_call_and_returns_nothing():
    sampler = make_sampler(SamplerSettings.from_args(flags()), tiny_llama(), TOKENIZER)
    timings = {}
    assert sampler.generate([], timings) == ([], None) and timings == {}  # alone: nobody to wait for
    sampler.lockstep = True  # as on a ZeRO-3 engine with several ranks, where the gather is collective
    assert sampler.generate([], timings) == ([], None)
    assert set(timings) == {"gather", "generate"}  # it did run a (dummy) generate


def test_actor_samplers_have_nothing_to_sync_or_put_to_sleep():
    model = tiny_llama()
    sampler = make_sampler(SamplerSettings.from_args(flags()), model, TOKENIZER)
    before = {k: v for k, v in vars(model).items()}
    sampler.sync_weights(), sampler.sleep(), sampler.wake()
    assert vars(model) == before and sampler.eos_ids == [63] and sampler.device == model.device
