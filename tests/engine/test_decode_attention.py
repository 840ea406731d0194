"""rl/engine/decode_attention.py (--decode_attention one_query, the default): the decode loop's one-token steps on a
bf16 CPU model attend by two fp32 matmuls. They must give attention's value (closer to fp64 than SDPA's bf16 kernel is,
with and without padding), leave fp32 decoding exactly as it was, reach every decode step and no other forward, and
leave the model on its own attention afterwards, even after an error."""
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

import rl.engine.decode_attention as decode_attention
from rl.engine.decode_attention import applies, decoding_attention, one_query_attention
from rl.engine.models import load_tokenizer
from rl.rollout.decode import sample_batch, sample_batch_with_signals
from rl.rollout.samplers import SamplerSettings, make_sampler
from rl.rollout.tokens import encode_prompts
from rl.update.batching import batched_response_logprobs
from tests.helpers import default_args


def _qkv(dtype, batch=5, heads=6, kv_heads=2, length=11, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)
            for shape in ((batch, heads, 1, dim), (batch, kv_heads, length, dim), (batch, kv_heads, length, dim))]


def _reference(q, k, v, keep, scale):
    """fp64 attention of one query over the kept positions, the KV heads repeated as GQA shares them."""
    group = q.shape[1] // k.shape[1]
    k, v = (x.double().repeat_interleave(group, dim=1) for x in (k, v))
    scores = (q.double() @ k.transpose(-1, -2)) * scale
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    return (torch.softmax(scores, -1) @ v).transpose(1, 2)  # [B, 1, H, D]


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_one_query_attention_is_attention_and_no_further_from_fp64_than_sdpa_in_bf16(mask_kind):
    q, k, v = _qkv(torch.bfloat16)
    keep = torch.ones(5, 1, 1, 11, dtype=torch.bool)
    keep[0, ..., :4] = keep[3, ..., :7] = False  # left padding of two rows
    mask = {"none": None, "bool": keep,
            "additive": torch.zeros(keep.shape, dtype=torch.bfloat16).masked_fill(~keep, float("-inf"))}[mask_kind]
    want = _reference(q, k, v, None if mask is None else keep, 0.25)
    got = one_query_attention(q, k, v, mask, 0.25)
    assert got.dtype == torch.bfloat16 and got.shape == (5, 1, 6, 16)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else keep, scale=0.25,
                                          enable_gqa=True).transpose(1, 2)
    ours, theirs = (got.double() - want).abs().max().item(), (sdpa.double() - want).abs().max().item()
    assert ours <= max(theirs, 2 ** -8)  # one bf16 rounding of the output at most
    # fp32 inputs: attention to fp32 precision
    q32, k32, v32 = (x.float() for x in (q, k, v))
    torch.testing.assert_close(one_query_attention(q32, k32, v32, mask if mask is None or mask.dtype == torch.bool
                                                   else mask.float(), 0.25).double(),
                               _reference(q32, k32, v32, None if mask is None else keep, 0.25), atol=1e-5, rtol=1e-5)


def test_only_cpu_one_token_low_precision_calls_take_the_path():
    q16, _, _ = _qkv(torch.bfloat16)
    q32, _, _ = _qkv(torch.float32)
    assert applies(q16, None) and applies(q16, torch.ones(5, 1, 1, 11, dtype=torch.bool))
    assert not applies(q32, None)  # fp32 keeps SDPA: fast there, and greedy decoding stays HF generate's
    assert not applies(torch.zeros(5, 6, 3, 16, dtype=torch.bfloat16), None)  # prefill
    assert not applies(q16, torch.ones(5, 1, 3, 11, dtype=torch.bool))


def _model(path, dtype):
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()


def _prompts(tok, n=6):  # prompts of different lengths: the batch is left-padded
    return encode_prompts(tok, [[{"role": "user", "content": f"{a} + {a * 37}"}] for a in range(n)], 64)


def _count_paths(monkeypatch):
    calls = {"one_query": 0, "sdpa": 0}
    one_query, sdpa = decode_attention.one_query_attention, decode_attention.sdpa_forward

    def counted_one_query(*a, **kw):
        calls["one_query"] += 1
        return one_query(*a, **kw)

    def counted_sdpa(*a, **kw):
        calls["sdpa"] += 1
        return sdpa(*a, **kw)
    monkeypatch.setattr(decode_attention, "one_query_attention", counted_one_query)
    monkeypatch.setattr(decode_attention, "sdpa_forward", counted_sdpa)
    return calls


def test_a_bf16_decode_takes_the_path_at_every_token_step_and_records_the_training_forwards_logprobs(
        tiny_model_dir, monkeypatch):
    model, tok = _model(tiny_model_dir, torch.bfloat16), load_tokenizer(tiny_model_dir)
    ids, mask = _prompts(tok)
    calls = _count_paths(monkeypatch)
    torch.manual_seed(0)
    out, recorded = sample_batch_with_signals(model, ids, mask, 8, [-1], 0.7, signals={"logp"})  # EOS ignored
    layers = model.config.num_hidden_layers
    assert calls == {"one_query": 7 * layers, "sdpa": layers}  # 7 one-token steps after the prefill
    assert model.config._attn_implementation == "sdpa"
    response = torch.tensor(out)
    full, full_mask = torch.cat([ids, response], 1), torch.cat([mask, torch.ones_like(response)], 1)
    with torch.no_grad():
        train = batched_response_logprobs(model, full, full_mask, ids.shape[1], 0.7, micro=8).float()
    got = torch.tensor([s.logp for s in recorded])
    assert (got - train).abs().max().item() < 0.1  # bf16 rounding on other shapes, no more


def test_sdpa_keeps_the_models_own_attention(tiny_model_dir, monkeypatch):
    model, tok = _model(tiny_model_dir, torch.bfloat16), load_tokenizer(tiny_model_dir)
    ids, mask = _prompts(tok)
    calls = _count_paths(monkeypatch)
    sample_batch(model, ids, mask, 5, [-1], 0.0, attention="sdpa")
    assert calls == {"one_query": 0, "sdpa": 0}  # the model's registered "sdpa" function, not credo's wrapper
    with pytest.raises(ValueError, match="attention='flash'"):
        sample_batch(model, ids, mask, 5, [-1], 0.0, attention="flash")


def test_fp32_greedy_decoding_is_unchanged(tiny_model_dir):
    model, tok = _model(tiny_model_dir, torch.float32), load_tokenizer(tiny_model_dir)
    ids, mask = _prompts(tok, 8)
    assert sample_batch(model, ids, mask, 12, [tok.eos_token_id], 0.0) == \
        sample_batch(model, ids, mask, 12, [tok.eos_token_id], 0.0, attention="sdpa")


def test_the_model_is_back_on_its_own_attention_after_an_error(tiny_model_dir):
    model = _model(tiny_model_dir, torch.bfloat16)
    with pytest.raises(RuntimeError, match="boom"):
        with decoding_attention(model):
            assert model.config._attn_implementation == decode_attention.NAME
            raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"
    eager = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16, attn_implementation="eager")
    with decoding_attention(eager):
        assert eager.config._attn_implementation == "eager"  # another implementation is left as it is


def test_the_flag_reaches_the_decode_loop(tiny_model_dir, monkeypatch):
    tok, model = load_tokenizer(tiny_model_dir), _model(tiny_model_dir, torch.bfloat16)
    calls = _count_paths(monkeypatch)
    for value, took_path in (("sdpa", False), ("one_query", True)):
        calls.update(one_query=0)
        sampler = make_sampler(SamplerSettings.from_args(default_args(decode_attention=value)), model, tok)
        sampler.generate([tok.encode("1 + 1 =")] * 2, {})
        assert (calls["one_query"] > 0) == took_path, value
    from rl.config import parse_args
    assert parse_args([]).decode_attention == "one_query"
    with pytest.raises(SystemExit):
        parse_args(["--decode_attention", "flash"])
