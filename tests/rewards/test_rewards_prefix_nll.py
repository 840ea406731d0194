"""rewards/prefix_nll.py: NOVER's reference NLL on the decode loop's kept KV cache equals reference_nll's full
forward (the fallback rows included), makes as many forward calls, and really reads the cache (a wrong one shows)."""
import pytest
import torch

from rewards.policy_rewards import PolicyRewards, PolicyRewardSettings
from rewards.policy_signals import nover_example, reference_nll
from rewards.prefix_nll import CachedPrefix, cached_reference_nll, reusable_length
from rl.rollout.decode import sample_batch_with_signals
from rl.engine.models import load_tokenizer
from rl.rollout.sampling_signals import SamplingSignals, layout_signals
from rl.rollout.tokens import encode_prompts
from tests.helpers import default_args

TOL = dict(rtol=1e-4, atol=1e-4)
PROMPTS = ["What is 3 + 4?", "Add 12 and 30, please.", "7 - 2 =", "What is 9 + 9? Think first."]
ANSWERS = ["7", "42", "5", "18"]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The tiny model with sharp attention: at its random init attention is near uniform, so a cache read at the
    wrong positions (RoPE off by one) would change the NLL by less than the tolerance."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    return model, load_tokenizer(tiny_model_dir)


def sampled(model, tok, signals, seed=0, group=3):
    """Prompts of different lengths (left padding), group samples each; a few letters end a response, so rows leave
    the decode batch at different steps. Returns (prompt token lists, responses, TurnSignals, answers)."""
    conversations = [[{"role": "user", "content": p}] for p in PROMPTS for _ in range(group)]
    ids, mask = encode_prompts(tok, conversations, 128)
    stops = [tok.convert_tokens_to_ids(c) for c in "aeiou"] + [tok.eos_token_id]
    torch.manual_seed(seed)
    responses, recorded = sample_batch_with_signals(model, ids, mask, 12, stops, 0.7, signals=signals)
    prompts = [ids[i][mask[i].bool()].tolist() for i in range(len(ids))]
    return prompts, responses, recorded, [a for a in ANSWERS for _ in range(group)]


def nover_rows(tok, prompts, responses, answers):
    examples = [nover_example(tok, p, tok.decode(r), a, "boxed") for p, r, a in zip(prompts, responses, answers)]
    return [c for c, _, _ in examples], [t for _, t, _ in examples]


@pytest.mark.parametrize("signals", [{"prefix_kv"}, {"prefix_kv", "hidden", "entropy"}])
def test_cached_prefix_nll_equals_the_full_forward_nll(tiny, signals):
    model, tok = tiny
    prompts, responses, recorded, answers = sampled(model, tok, signals)
    assert len({len(r) for r in responses}) > 2  # rows finished at different decode steps
    contexts, targets = nover_rows(tok, prompts, responses, answers)
    prefixes = [sig.prefix for sig in recorded]
    prefixes[1] = None  # a row whose sampler kept no cache: the full forward
    reuse = [reusable_length(p, c) for p, c in zip(prefixes, contexts)]
    assert reuse[1] == 0 and all(m >= len(p) for m, p in zip(reuse[2:], prompts[2:]))  # the rest reuse the prompt
    full = reference_nll(model, contexts, targets, tok.pad_token_id, "cpu", micro=4)
    cached = cached_reference_nll(model, contexts, targets, prefixes, tok.pad_token_id, "cpu", micro=4)
    torch.testing.assert_close(cached, full, **TOL)


def test_cache_of_the_wrong_row_is_not_reused_past_the_common_tokens(tiny):
    """Row 0 handed row 3's cache (another prompt, as a filter that forgot SamplingSignals.select would): only the
    tokens both share are reused, so the value is still the full forward's."""
    model, tok = tiny
    prompts, responses, recorded, answers = sampled(model, tok, {"prefix_kv"})
    contexts, targets = nover_rows(tok, prompts, responses, answers)
    prefixes = [sig.prefix for sig in recorded]
    prefixes[0], prefixes[3] = prefixes[3], prefixes[0]
    assert reusable_length(prefixes[0], contexts[0]) < len(prompts[0])
    full = reference_nll(model, contexts, targets, tok.pad_token_id, "cpu", micro=4)
    cached = cached_reference_nll(model, contexts, targets, prefixes, tok.pad_token_id, "cpu", micro=4)
    torch.testing.assert_close(cached, full, **TOL)


def test_misaligned_cache_values_change_the_nll(tiny):
    """The cache is really read: keys and values of another row under this row's tokens give another NLL (so the
    equality tests above would catch a decode loop that kept the wrong row's or a stale step's cache)."""
    model, tok = tiny
    prompts, responses, recorded, answers = sampled(model, tok, {"prefix_kv"})
    contexts, targets = nover_rows(tok, prompts, responses, answers)
    good, other = recorded[0].prefix, recorded[3].prefix
    n = min(len(good.tokens), len(other.tokens))
    wrong = CachedPrefix(good.tokens[:n], [k[:, :n] for k in other.keys], [v[:, :n] for v in other.values])
    right = CachedPrefix(good.tokens[:n], [k[:, :n] for k in good.keys], [v[:, :n] for v in good.values])
    args = ([contexts[0]], [targets[0]])
    with_right = cached_reference_nll(model, *args, [right], tok.pad_token_id, "cpu")
    with_wrong = cached_reference_nll(model, *args, [wrong], tok.pad_token_id, "cpu")
    torch.testing.assert_close(with_right, reference_nll(model, *args, tok.pad_token_id, "cpu"), **TOL)
    assert abs(float(with_wrong - with_right)) > 1e-3


def test_cached_prefix_holds_the_context_and_response_the_cache_covers(tiny):
    model, tok = tiny
    for signals, unfed in (({"prefix_kv"}, 1), ({"prefix_kv", "hidden"}, 0)):
        prompts, responses, recorded, _ = sampled(model, tok, signals)
        for p, r, sig in zip(prompts, responses, recorded):
            assert sig.prefix.tokens == p + r[:len(r) - unfed]
            assert all(k.shape[1] == len(sig.prefix.tokens) for k in sig.prefix.keys + sig.prefix.values)


def test_as_many_forward_calls_with_or_without_cache_on_every_mix_of_rows(tiny):
    """ZeRO-3 ranks must make the same number of forwards: ceil(N / micro), whichever rows kept a cache."""
    model, tok = tiny
    prompts, responses, recorded, answers = sampled(model, tok, {"prefix_kv"})
    contexts, targets = nover_rows(tok, prompts, responses, answers)
    calls = []
    handle = model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        for keep in (range(0), range(len(recorded)), range(0, len(recorded), 3)):
            prefixes = [sig.prefix if i in keep else None for i, sig in enumerate(recorded)]
            calls.clear()
            cached_reference_nll(model, contexts, targets, prefixes, tok.pad_token_id, "cpu", micro=5)
            assert len(calls) == 3  # 12 rows, micro 5
    finally:
        handle.remove()


def test_policy_rewards_ppl_on_the_kept_cache_equals_the_full_forward_and_frees_it(tiny):
    model, tok = tiny
    prompts, responses, recorded, answers = sampled(model, tok, {"prefix_kv", "entropy", "hidden"})
    from rl.rollout.episodes import _layout
    segments = [[(r, 0)] for r in responses]
    batch = _layout(tok, prompts, segments, torch.zeros(len(prompts), 1), [tok.decode(r) for r in responses],
                    [{"answer": a} for a in answers], torch.arange(len(prompts)) // 3, "cpu")
    batch.signals = layout_signals(segments, [[sig] for sig in recorded], batch.response_mask.shape[1], "cpu")
    assert batch.signals.prefixes is not None
    args = default_args(per_device_train_micro_batch_size=4)
    rewards = PolicyRewards(["ppl"], PolicyRewardSettings.from_args(args), model, tok)
    assert "prefix_kv" in rewards.sampling_signals
    cached = rewards.reasoning_log_perplexity(batch)
    assert batch.signals.prefixes is None  # dropped: the update wants the memory
    full = rewards.reasoning_log_perplexity(batch)  # no cache now: the full forward
    torch.testing.assert_close(cached, full, **TOL)


def test_selecting_rows_selects_their_cached_prefixes(tiny):
    model, tok = tiny
    _, _, recorded, _ = sampled(model, tok, {"prefix_kv"})
    signals = SamplingSignals(prefixes=[sig.prefix for sig in recorded])
    picked = signals.select(torch.tensor([4, 0]))
    assert picked.prefixes[0] is recorded[4].prefix and picked.prefixes[1] is recorded[0].prefix
