"""The samplers on a real DeepSpeed ZeRO-3 actor (tiny Llama, one process): generation gathers the partitions and
draws what the unpartitioned model draws under the same seed, and the actor trains afterwards (ZeRO's hooks are
back); transformers' ZeRO-3 config lives as long as the engine without anything attached to it."""
import gc

import pytest
import torch

from tests.helpers import one_rank_process_group

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zero3(tiny_model_dir):
    with one_rank_process_group():
        from rl.config import parse_args
        from rl.engine.actor import EngineSettings, build_actor
        args = parse_args(["--model_name_or_path", tiny_model_dir, "--env", "tests.fixture_envs:DigitFractionEnv",
                           "--output_dir", "unused", "--actor_zero_stage", "3", "--max_answer_seq_len", "8"])
        actor = build_actor(EngineSettings.from_args(args), 1, 10)
        yield args, actor
        del actor


def test_transformers_zero3_config_lives_with_the_engine_and_nothing_is_attached_to_it(zero3):
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
    _, actor = zero3
    gc.collect()  # transformers holds the config by a weak reference only
    assert is_deepspeed_zero3_enabled()
    assert not [name for name in vars(actor) if name.startswith("_credo") or name.startswith("credo")]


def turn_contexts(tok):
    return [tok("1+2=")["input_ids"], tok("30+4=")["input_ids"], tok("5")["input_ids"]]


@pytest.mark.parametrize("loop", ["credo", "hf_generate"])
def test_a_zero3_actor_samples_what_the_plain_model_samples_under_one_seed(zero3, tiny_model_dir, loop):
    from transformers import AutoModelForCausalLM
    from transformers.integrations import deepspeed as hf_deepspeed

    from rl.engine.models import load_tokenizer
    from rl.rollout.samplers import SamplerSettings, make_sampler
    args, actor = zero3
    args.decode_loop = loop
    tok = load_tokenizer(tiny_model_dir)
    torch.manual_seed(3)
    timings = {}
    got, _ = make_sampler(SamplerSettings.from_args(args), actor, tok).generate(turn_contexts(tok), timings)
    assert timings["gather"] > 0 and timings["generate"] > 0

    weak = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed._hf_deepspeed_config_weak_ref = None  # load a plain, unpartitioned copy of the same weights
    try:
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = weak
    assert not hasattr(next(plain.parameters()), "ds_id")
    torch.manual_seed(3)
    want, _ = make_sampler(SamplerSettings.from_args(args), plain, tok).generate(turn_contexts(tok), {})
    assert got == want and any(len(r) > 1 for r in got)


def test_the_actor_trains_on_its_partitions_after_generating(zero3, tiny_model_dir):
    """Generation detached ZeRO's per-module hooks; without them back, the forward would see empty partitions."""
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus

    from rl.engine.models import load_tokenizer
    from rl.rollout.samplers import SamplerSettings, make_sampler
    args, actor = zero3
    tok = load_tokenizer(tiny_model_dir)
    make_sampler(SamplerSettings.from_args(args), actor, tok).generate(turn_contexts(tok), {})
    assert all(p.ds_status == ZeroParamStatus.NOT_AVAILABLE for p in actor.module.parameters())  # released again
    ids = torch.randint(4, 90, (2, 12))
    for _ in range(actor.gradient_accumulation_steps()):
        loss = actor(input_ids=ids, labels=ids).loss
        actor.backward(loss)
        actor.step()
    assert torch.isfinite(loss) and actor.global_steps == 1
