"""rl/rollout/decode.py: the sampling loop that drops finished responses from the batch."""
import torch

from rl.rollout.decode import logits_warpers, sample_batch, sample_from_logits
from rl.rollout.tokens import left_pad


def test_inverse_cdf_sampling_draws_from_the_softmax():
    """20000 draws from a 5-token distribution (one token cut to -inf): frequencies within 4 standard errors of
    the probabilities, and the cut token never drawn."""
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, float("-inf")]]).repeat(20000, 1)
    gen = torch.Generator().manual_seed(0)
    draws = sample_from_logits(logits, generator=gen)
    freq = torch.bincount(draws, minlength=5).float() / len(draws)
    probs = torch.softmax(logits[0], -1)
    stderr = (probs * (1 - probs) / len(draws)).sqrt()
    assert freq[4] == 0
    assert ((freq - probs).abs() <= 4 * stderr + 1e-9).all(), (freq, probs)


def test_warpers_are_hf_generates_top_k_and_top_p():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    top2 = logits_warpers(1.0, top_k=2, top_p=None)(None, logits.clone())
    assert torch.isinf(top2[0, 2:]).all() and torch.isfinite(top2[0, :2]).all()
    nucleus = logits_warpers(1.0, top_k=None, top_p=0.5)(None, logits.clone())  # p(4.0) = 0.64 covers 0.5
    assert torch.isfinite(nucleus[0]).sum() == 1
    hot = logits_warpers(0.5, top_k=None, top_p=1.0)(None, logits.clone())
    torch.testing.assert_close(hot, logits / 0.5)


def _lively_llama():
    """A random Llama with large weights, so that greedy decoding does not just repeat one token."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.5, pad_token_id=0)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def test_greedy_responses_equal_hf_generate_while_rows_finish_at_different_steps():
    """Rows leave the batch (and the KV cache) as they end; the rest must decode exactly as HF generate does."""
    model = _lively_llama()
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14], [15, 16, 17, 18, 19], [20, 21]]
    ids, mask = left_pad(prompts, 0, "cpu")
    with torch.no_grad():
        free = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12, pad_token_id=0,
                              eos_token_id=[63]).tolist()
    free = [row[ids.shape[1]:] for row in free]
    eos = sorted({free[0][2], free[2][4], free[4][6]})  # tokens that end some rows early and others later
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12, pad_token_id=0,
                              eos_token_id=eos).tolist()
    responses = sample_batch(model, ids, mask, 12, eos, temperature=0.0)
    for i, (got, row) in enumerate(zip(responses, want)):
        row = row[ids.shape[1]:]
        stop = next((j for j, t in enumerate(row) if t in eos), len(row) - 1)
        assert got == row[:stop + 1], i
    assert len({len(r) for r in responses}) >= 3  # rows did finish at different steps


def test_both_decode_loops_give_the_same_greedy_turns_through_their_samplers():
    """--decode_loop credo and hf_generate: the same responses (through the first EOS) from rl.rollout.samplers' samplers."""
    from types import SimpleNamespace

    from rl.rollout.samplers import SamplerSettings, make_sampler
    model = _lively_llama()
    tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=7)  # what a sampler reads of a tokenizer
    contexts = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14]]
    out = {}
    for loop in ("credo", "hf_generate"):
        args = SimpleNamespace(decode_loop=loop, max_answer_seq_len=10, temperature=0.0, top_k=0, top_p=1.0)
        out[loop] = make_sampler(SamplerSettings.from_args(args), model, tokenizer).generate(contexts, timings={})[0]
    assert out["credo"] == out["hf_generate"]
    assert all(len(r) <= 10 for r in out["credo"])


def test_identical_contexts_are_prefilled_once_and_decode_as_if_apart():
    """A prompt's G copies go through the prefill as one row, their cache rows copied: each copy then decodes
    exactly as that context alone (greedy), and the first forward saw only the distinct contexts."""
    model = _lively_llama()
    a, b = [5, 6, 7, 8], [9, 10]
    ids, mask = left_pad([a, b, a, a, b], 0, "cpu")
    batch_rows = []
    handle = model.register_forward_pre_hook(lambda m, args, kw: batch_rows.append(kw["input_ids"].shape[0]),
                                             with_kwargs=True)
    try:
        responses = sample_batch(model, ids, mask, 10, [63], temperature=0.0)
    finally:
        handle.remove()
    assert batch_rows[0] == 2
    for context, got in ((a, responses[0]), (b, responses[1])):
        alone_ids, alone_mask = left_pad([context], 0, "cpu")
        assert got == sample_batch(model, alone_ids, alone_mask, 10, [63], temperature=0.0)[0]
    assert responses[2] == responses[3] == responses[0] and responses[4] == responses[1]
