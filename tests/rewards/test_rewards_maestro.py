"""MAESTRO's rewards on their own: len, ppl (NOVER-style), ent and the Conductor's hidden state, pref."""
import math

import pytest
import torch

from rewards.length import LinearLengthReward, linear_length_score
from rewards.policy_rewards import PolicyRewards, PolicyRewardSettings, normalise
from rewards.policy_signals import (entropy_and_last_hidden, nover_example, nover_length_factor, nover_tokens,
                                    reference_nll)
from rl.rollout.tokens import left_pad
from tests.helpers import build_char_tokenizer


@pytest.mark.parametrize("length,expected", [(0, 1.0), (10, 1.0), (15, 0.5), (20, 0.0), (99, 0.0), (12, 0.8)])
def test_linear_length_is_one_up_to_len_min_then_falls_to_zero_at_len_max(length, expected):
    assert linear_length_score(length, 10, 20) == pytest.approx(expected)


def test_length_linear_reward_counts_words_without_a_tokenizer():
    reward = LinearLengthReward(2, 4)
    assert reward(None, "one two three", None) == pytest.approx(0.5)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


def manual_nll(model, context, target):
    ids = torch.tensor([context + target])
    logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    positions = range(len(context) - 1, len(context) + len(target) - 1)
    return -sum(logp[p, ids[0, p + 1]] for p in positions).item() / len(target)


def test_nover_nll_is_the_mean_nll_of_the_reference_answer_after_the_reasoning(tiny):
    model, tok = tiny
    prompt = tok("Q: 2+3?", add_special_tokens=False)["input_ids"]
    context, target = nover_tokens(tok, prompt, "I add them. \\boxed{6}", 5)
    assert tok.decode(context).endswith("I add them. \\boxed{") and tok.decode(target) == "5}"
    short_context, short_target = nover_tokens(tok, prompt, "5", "5")
    nll = reference_nll(model, [context, short_context], [target, short_target], tok.pad_token_id, "cpu")
    assert nll[0].item() == pytest.approx(manual_nll(model, context, target), rel=1e-4)
    assert nll[1].item() == pytest.approx(manual_nll(model, short_context, short_target), rel=1e-4)


def test_nover_abstains_without_a_reference_answer(tiny):
    model, tok = tiny
    context, target = nover_tokens(tok, [5, 6], "text", None)
    assert target == []
    nll = reference_nll(model, [context, context + [7]], [target, [8]], tok.pad_token_id, "cpu")
    assert torch.isnan(nll[0]) and torch.isfinite(nll[1])


def test_entropy_and_hidden_state_of_the_last_real_token(tiny):
    model, tok = tiny
    prompts = [[10, 11, 12], [13, 14]]
    ids, mask = left_pad(prompts, tok.pad_token_id, "cpu")
    responses = torch.tensor([[20, 21, 22], [23, tok.pad_token_id, tok.pad_token_id]])
    response_mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    input_ids = torch.cat([ids, responses], 1)
    attention_mask = torch.cat([mask, response_mask.long()], 1)
    entropy, hidden = entropy_and_last_hidden(model, input_ids, attention_mask, ids.shape[1], response_mask, 1.0)
    assert hidden.shape == (2, model.config.hidden_size)
    # row 1 alone, unpadded: prompt 13 14 then its single response token 23
    out = model(input_ids=torch.tensor([[13, 14, 23]]), output_hidden_states=True)
    torch.testing.assert_close(hidden[1], out.hidden_states[-1][0, -1], rtol=1e-4, atol=1e-5)
    probs = torch.softmax(out.logits[0, 1].float(), -1)
    assert entropy[1].item() == pytest.approx(-(probs * probs.log()).sum().item(), rel=1e-4)


def test_preference_reward_scores_with_a_sequence_classification_model(tmp_path):
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from rewards.preference import PreferenceReward
    from tests.helpers import build_char_tokenizer
    tok = build_char_tokenizer()
    config = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    LlamaForSequenceClassification(config).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    reward = PreferenceReward(str(tmp_path), batch_size=2)
    scores = reward.score(["hi", "hi", "a longer prompt"], ["ok", "no thanks", "sure"])
    assert scores.shape == (3,) and torch.isfinite(scores).all()
    # batching and padding do not change a score
    assert reward("hi", "no thanks", {}) == pytest.approx(scores[1].item(), rel=1e-4, abs=1e-5)


def test_nover_context_under_tags_closes_the_reasoning_once(tiny):
    _, tok = tiny
    completion = "<think>I add 2 and 3.</think>\n<answer>5</answer>"
    context, target = nover_tokens(tok, [], completion, 5, style="tags")
    text = tok.decode(context)
    assert text.endswith("<think>I add 2 and 3.</think>\n<answer>"), text
    assert text.count("</think>") == 1, text   # was "...</think> </think>\n<answer>"
    assert tok.decode(target) == "5</answer>"
    # a response that never closed its reasoning still gets the closing tag once
    unclosed = tok.decode(nover_tokens(tok, [], "<think>I add <answer>5</answer>", 5, style="tags")[0])
    assert unclosed.count("</think>") == 1 and unclosed.endswith("</think>\n<answer>")


def test_nover_length_factor_is_max_one_one_plus_log_t():
    assert nover_length_factor(0) == 1.0 and nover_length_factor(1) == 1.0
    assert nover_length_factor(20) == pytest.approx(1 + math.log(20))
    _, _, reasoning_tokens = nover_example(build_char_tokenizer(), [], "abc \\boxed{1}", "1")
    assert reasoning_tokens == 3  # "abc", one token per character, the answer part left out


def test_policy_reward_signs_follow_nover_maestro_and_entropy_minimisation():
    raw = {"ppl": torch.tensor([0.5, 2.0]), "ent": torch.tensor([0.1, 3.0]), "em_ent": torch.tensor([0.1, 3.0]),
           "pref": torch.tensor([-1.0, 1.0]), "len": torch.tensor([1.0, 0.0])}
    out = normalise(raw, torch.tensor([0, 0]))
    # NOVER: lower reasoning perplexity is better; MAESTRO's ent: higher entropy is better (exploration, its 4.1);
    # EM-GRPO's em_ent: lower entropy is better (EM-RL); pref: higher is better
    torch.testing.assert_close(out["ppl"], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(out["ent"], torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(out["em_ent"], torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(out["pref"], torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(out["len"], raw["len"])  # already on [0, 1]


def tiny_batch(model, tok, completions, answers):
    """A Rollout-like batch of single-turn responses to one prompt (one group)."""
    from types import SimpleNamespace
    prompt = tok("Q: 2+3?", add_special_tokens=False)["input_ids"]
    responses = [tok(c, add_special_tokens=False)["input_ids"] for c in completions]
    width = max(map(len, responses))
    ids = torch.tensor([prompt + r + [tok.pad_token_id] * (width - len(r)) for r in responses])
    response_mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in responses])
    attention_mask = torch.cat([torch.ones(len(responses), len(prompt), dtype=torch.long), response_mask.long()], 1)
    return SimpleNamespace(input_ids=ids, attention_mask=attention_mask, prompt_len=len(prompt),
                           response_mask=response_mask, completions=completions, prompts=["Q: 2+3?"] * len(responses),
                           samples=[{"answer": a} for a in answers], group_ids=torch.zeros(len(responses), dtype=torch.long))


def test_policy_rewards_score_a_batch_with_the_policy(tiny):
    from types import SimpleNamespace
    model, tok = tiny
    args = SimpleNamespace(format_style="boxed", len_min=2, len_max=6, temperature=1.0, answer_key="answer",
                           per_device_train_micro_batch_size=2, reward_model_name_or_path=None)
    rewards = PolicyRewards(["fmt", "len", "ppl", "ent"], PolicyRewardSettings.from_args(args), model, tok)
    batch = tiny_batch(model, tok, ["so \\boxed{5}", "it is five", "5"], [5, 5, None])
    raw, hidden = rewards.raw(batch)
    assert hidden.shape == (3, model.config.hidden_size)
    torch.testing.assert_close(raw["fmt"], torch.tensor([1.0, 0.0, 0.0]))
    lengths = batch.response_mask.sum(1).tolist()
    torch.testing.assert_close(raw["len"], torch.tensor([linear_length_score(int(n), 2, 6) for n in lengths]))
    context, target, t = nover_example(tok, batch.input_ids[0, :batch.prompt_len].tolist(), "so \\boxed{5}", 5)
    assert raw["ppl"][0].item() == pytest.approx(manual_nll(model, context, target) / nover_length_factor(t), rel=1e-4)
    assert torch.isnan(raw["ppl"][2])  # no reference answer: abstains
    assert (raw["ent"] > 0).all()
    with pytest.raises(ValueError, match="not policy rewards"):
        PolicyRewards(["correctness"], PolicyRewardSettings.from_args(args), model, tok)
