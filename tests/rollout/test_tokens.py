"""rl/rollout/tokens.py: EOS masks and chat-template prompt encoding."""
import torch

from rl.rollout.tokens import encode_prompts, response_mask_from_ids


def test_response_mask_keeps_tokens_through_the_first_eos():
    ids = torch.tensor([[5, 6, 2, 0, 0], [5, 2, 2, 2, 2], [7, 7, 7, 7, 7]])
    mask = response_mask_from_ids(ids, eos_token_ids=[2])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_prompts_are_left_padded_chat_encodings(tiny_model_dir):
    from rl.engine.models import load_tokenizer
    tok = load_tokenizer(tiny_model_dir)
    ids, mask = encode_prompts(tok, [[{"role": "user", "content": "1+1?"}], [{"role": "user", "content": "10+10?"}]], 64)
    assert ids.shape == mask.shape and mask[0, 0] == 0 and mask[1].all()
    text = tok.decode(ids[0][mask[0].bool()])
    assert text == tok.apply_chat_template([{"role": "user", "content": "1+1?"}], tokenize=False, add_generation_prompt=True)
