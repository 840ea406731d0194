"""rl/engine/packed_linear.py (--cpu_packed_weights): the actor's linears on prepacked oneDNN weights while it
generates give the plain kernel's results up to float rounding, follow every in-place weight update, and leave the
model as it was."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from rl.engine.models import load_tokenizer
from rl.engine.packed_linear import PackedLinears, available
from rl.rollout.decode import sample_batch
from rl.rollout.samplers import SamplerSettings, make_sampler
from rl.rollout.tokens import encode_prompts
from tests.helpers import default_args

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch build has no oneDNN")


def _model(path, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_logits_match_the_plain_kernels_and_the_model_is_restored(tiny_model_dir, dtype):
    model = _model(tiny_model_dir, dtype)
    assert available(model)
    ids = torch.randint(0, model.config.vocab_size, (3, 7))
    with torch.no_grad():
        plain = model(input_ids=ids).logits.float()
        with PackedLinears().applied(model, rows=3):
            packed = model(input_ids=ids).logits.float()
        again = model(input_ids=ids).logits.float()
    tolerance = 1e-4 if dtype == torch.float32 else 5e-2
    assert (packed - plain).abs().max().item() < tolerance * max(1.0, plain.abs().max().item())
    assert torch.equal(again, plain)  # the class's forward is back on every linear
    assert not any("forward" in vars(m) for m in model.modules())


def test_an_in_place_weight_update_is_repacked_and_an_unchanged_one_is_not(tiny_model_dir):
    model, packs = _model(tiny_model_dir), PackedLinears()
    ids = torch.randint(0, model.config.vocab_size, (2, 5))
    with torch.no_grad():
        with packs.applied(model, rows=2):
            model(input_ids=ids)
        kept = {m: e[1] for m, e in packs.packed.items()}
        model.lm_head.weight.mul_(2.0)  # what an optimizer step does: in place
        plain = model(input_ids=ids).logits
        with packs.applied(model, rows=2):
            packed = model(input_ids=ids).logits
    torch.testing.assert_close(packed, plain, atol=1e-4, rtol=1e-4)  # the new weight, not the stale copy
    assert packs.packed[model.lm_head][1] is not kept[model.lm_head]
    assert packs.packed[model.model.layers[0].mlp.up_proj][1] is kept[model.model.layers[0].mlp.up_proj]


def test_an_update_that_bumps_no_version_is_repacked_at_the_next_optimizer_step(tiny_model_dir):
    """DeepSpeed's mixed-precision optimizers write the weights through param.data.copy_, which no version counter
    sees: the engine's step count is what tells the packs a new step has come."""
    model, packs = _model(tiny_model_dir), PackedLinears()
    ids = torch.randint(0, model.config.vocab_size, (2, 5))
    with torch.no_grad():
        with packs.applied(model, rows=2, step=0):
            model(input_ids=ids)
        model.lm_head.weight.data.copy_(model.lm_head.weight * 2.0)  # no version bump
        plain = model(input_ids=ids).logits
        with packs.applied(model, rows=2, step=1):
            packed = model(input_ids=ids).logits
    torch.testing.assert_close(packed, plain, atol=1e-4, rtol=1e-4)


def test_the_decode_loop_with_packed_weights_decodes_greedily_as_without(tiny_model_dir):
    model, tok = _model(tiny_model_dir), load_tokenizer(tiny_model_dir)
    ids, mask = encode_prompts(tok, [[{"role": "user", "content": f"{a} + {a}"}] for a in range(8)], 64)
    plain = sample_batch(model, ids, mask, 12, [tok.eos_token_id], 0.0)
    with PackedLinears().applied(model, rows=8):
        packed = sample_batch(model, ids, mask, 12, [tok.eos_token_id], 0.0)
    assert packed == plain


def test_the_flag_reaches_the_sampler_and_is_refused_with_vllm(tiny_model_dir):
    tok, model = load_tokenizer(tiny_model_dir), _model(tiny_model_dir)
    sampler = make_sampler(SamplerSettings.from_args(default_args(cpu_packed_weights=True)), model, tok)
    tokens, _ = sampler.generate([tok.encode("1 + 1 =")] * 2, {})
    assert len(tokens) == 2 and sampler.packs.packed  # the linears were packed for the call
    assert not any("forward" in vars(m) for m in model.modules())
    from rl.config import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--cpu_packed_weights", "--rollout_backend", "vllm"])


def test_packing_is_on_by_default_for_credos_loop_only_and_can_be_turned_off():
    from rl.config import parse_args
    from rl.rollout.samplers import SamplingSettings

    def packed(argv):
        return SamplingSettings.from_args(parse_args(argv)).packed_weights
    assert packed([]) is True
    assert packed(["--decode_loop", "hf_generate"]) is False  # the plain reference stays plain
    assert packed(["--decode_loop", "hf_generate", "--cpu_packed_weights"]) is True
    assert packed(["--no-cpu_packed_weights"]) is False
    from rl.rollout.samplers import validate_sampling
    refusals = []
    validate_sampling(default_args(rollout_backend="vllm"), refusals.append)
    assert refusals == []  # the default is not a refusal with vLLM; the flag given is (above)
