"""Token layout shared by generation, the episode driver and the log-prob forwards: chat-template encoding, left
padding, EOS handling. Plain tensor and list functions (no model, no DeepSpeed)."""
import torch

from rewards.lm_tensors import left_pad  # noqa: F401 (re-exported: generation pads with it)


def encode_prompts(tokenizer, conversations: list, max_prompt_seq_len: int):
    """Left-padded chat-template encoding. Over-long prompts keep their end (where the question is).

    Returns (input_ids Tensor[B, P], attention_mask Tensor[B, P]).
    """
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    enc = tokenizer(texts, padding=True, truncation=True, max_length=max_prompt_seq_len, add_special_tokens=False,
                    return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def response_mask_from_ids(response_ids: torch.Tensor, eos_token_ids) -> torch.Tensor:
    """1 on generated tokens up to and including the first EOS, 0 after. Tensor[B, R] long -> Tensor[B, R] float."""
    is_eos = torch.zeros_like(response_ids, dtype=torch.bool)
    for eos in eos_token_ids:
        is_eos |= response_ids == eos
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # EOS tokens strictly before each position
    return (eos_before == 0).float()


def eos_ids(tokenizer, model_config) -> list:
    """Every id that ends a turn: the tokenizer's EOS and the model's generation_config EOS ids (sorted)."""
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model_config, "generation_config", None), "eos_token_id", None)
    for e in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]):
        if e is not None:
            ids.add(e)
    return sorted(i for i in ids if i is not None)
