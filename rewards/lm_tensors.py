"""Token tensors for a causal LM over left-padded batches: padding, the position ids that skip it, next-token entropy.

Pure tensor functions with no model or DeepSpeed inside. They live in rewards/, credo's lowest layer, because the
policy-based rewards (rewards/policy_signals.py) need them and rewards/ never imports rl/; rl's rollout and loss
import them from here.
"""
import torch


def left_pad(sequences: list, pad_id: int, device):
    """Token lists -> (Tensor[B, L] left-padded ids, Tensor[B, L] attention mask)."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        ids[i, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
        mask[i, width - len(seq):] = 1
    return ids.to(device), mask.to(device)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip left padding, matching what HF generate used. Tensor[B, L] -> Tensor[B, L]."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of each position's next-token distribution. logits: Tensor[..., V] -> Tensor[...]."""
    logz = torch.logsumexp(logits, dim=-1)
    probs = torch.softmax(logits, dim=-1)
    return logz - (probs * logits).sum(-1)
