"""rl/update/batching.py: the training forward's positions, log-probs and entropy."""
import torch

from rl.update.batching import position_ids_from_mask


def test_position_ids_skip_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_response_logprobs_and_entropy_match_a_full_log_softmax(tiny_model_dir):
    """Only the response positions go through the LM head, and entropy is computed a few rows at a time: the
    results must equal the plain full-sequence computation."""
    from transformers import AutoModelForCausalLM

    from rl.update.batching import response_logprobs
    from rl.rollout.tokens import left_pad
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    torch.manual_seed(0)
    prompts, _ = left_pad([[5, 6, 7], [8, 9]] * 3, 0, "cpu")
    input_ids = torch.cat([prompts, torch.randint(4, 60, (6, 4))], 1)
    mask = torch.ones_like(input_ids)
    mask[1::2, 0] = 0  # the left padding of the two-token prompts
    logp, entropy = response_logprobs(model, input_ids, mask, prompts.shape[1], temperature=0.7, with_entropy=True)
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
    full = torch.log_softmax(model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids).logits / 0.7, -1)
    want = full[:, 2:-1].gather(-1, input_ids[:, 3:].unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(logp, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(entropy, -(full[:, 2:-1].exp() * full[:, 2:-1]).sum(-1), rtol=1e-4, atol=1e-5)
