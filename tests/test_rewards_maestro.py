"""MAESTRO's rewards on their own: len, ppl (NOVER-style), ent and the Conductor's hidden state, pref."""
import pytest
import torch

from rewards.length import LinearLengthReward, linear_length_score
from rewards.policy_signals import entropy_and_last_hidden, nover_tokens, reference_nll
from rl.rollout import left_pad


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
