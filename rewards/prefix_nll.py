"""NOVER's reference-answer NLL (rewards/policy_signals.reference_nll) on the KV cache the sampling pass already holds.

reference_nll runs the policy over prompt + reasoning + answer opening + reference answer: on the CPU default run
that full forward is most of `time/policy_rewards`. But the decode loop (rl/rollout/decode.py) already computed the keys and
values of prompt + response for each row, and NOVER's context usually starts with exactly those tokens. So the decode
loop can keep each finished row's cache (the "prefix_kv" sampling signal, rl/rollout/sampling_signals.py) and the NLL needs a
forward of only the tokens after the longest common prefix of the context and the cached tokens (the end of the
reasoning after retokenisation, the answer opening) and the target, on the cache cut there.

The maths is reference_nll's: a causal LM's keys and values at a position depend only on the tokens up to it, so the
cut cache equals what the full forward computes there (within float tolerance: the decode loop ran them in other
batch shapes), positions continue from the cut, and the NLL is read at the same target positions. A row without a
cache (HF generate, vLLM, the hybrid engine record none) or whose first token differs is a row with a common prefix
of 0: its forward is the full one.

credo's reading (NOVER, arXiv 2505.16022, says nothing about how the perplexity is computed): reuse only where the
tokens match exactly, never a cache of "nearly" the same text.
"""
from dataclasses import dataclass

import torch

from rewards.lm_tensors import left_pad


@dataclass
class CachedPrefix:
    """The keys and values one row's forward computed, for the tokens `tokens` (position 0 first, no padding)."""
    tokens: list   # token ids
    keys: list     # per layer Tensor[kv_heads, len(tokens), head_dim]
    values: list   # per layer, the same shape

    @classmethod
    def from_cache(cls, cache, row: int, valid: torch.Tensor, tokens: list):
        """Row `row` of an HF cache at the positions where `valid` (Tensor[L] of the cache's width) is 1, or None
        where the cache is not plain full attention (a sliding window or a recurrent layer keeps no full prefix)."""
        from transformers.cache_utils import DynamicLayer
        layers = getattr(cache, "layers", None)
        if not layers or any(type(layer) is not DynamicLayer for layer in layers):
            return None
        valid = valid.bool()
        if int(valid.sum()) != len(tokens) or layers[0].keys.shape[-2] != valid.shape[0]:
            raise ValueError(f"cache row {row}: {int(valid.sum())} valid positions of {layers[0].keys.shape[-2]} "
                             f"for {len(tokens)} tokens: the decode loop's mask and cache are out of step")
        # boolean indexing copies: a view would keep the whole batch's cache tensor of that step alive
        return cls(list(tokens), [layer.keys[row][:, valid] for layer in layers],
                   [layer.values[row][:, valid] for layer in layers])


def reusable_length(prefix, context: list) -> int:
    """How many leading tokens of `context` can come from `prefix` (a CachedPrefix or None): their common prefix,
    less one where it covers the whole context (the last context token's logits predict the first target token,
    so it must go through the forward)."""
    if prefix is None:
        return 0
    cached, limit = prefix.tokens, min(len(prefix.tokens), len(context) - 1)
    m = 0
    while m < limit and cached[m] == context[m]:
        m += 1
    return m


@torch.no_grad()
def cached_reference_nll(model, contexts: list, targets: list, prefixes: list, pad_id: int, device,
                         micro: int = 16) -> torch.Tensor:
    """reference_nll (same arguments, same Tensor[N] result) where row i's forward starts on prefixes[i]'s cache.

    prefixes: N CachedPrefix or None, or None for all rows. Rows are grouped by how many tokens they must feed, so
    rows without a usable cache share micro-batches; a micro-batch where none has one is reference_nll's own full
    forward. There are ceil(N / micro) forward calls either way, as in reference_nll: all ranks of a ZeRO-3 engine
    make the same number of them (each call gathers parameters collectively).
    """
    from rewards.policy_signals import reference_nll
    n = len(contexts)
    prefixes = prefixes if prefixes is not None else [None] * n
    if len(prefixes) != n:
        raise ValueError(f"{len(prefixes)} cached prefixes for {n} rows")
    reuse = [reusable_length(p, c) for p, c in zip(prefixes, contexts)]
    fed = [len(c) - m + max(1, len(t)) for c, m, t in zip(contexts, reuse, targets)]
    order = sorted(range(n), key=lambda i: fed[i])
    out = torch.full((n,), float("nan"))
    for s in range(0, n, micro):
        chunk = order[s:s + micro]
        if not any(reuse[i] for i in chunk):
            values = reference_nll(model, [contexts[i] for i in chunk], [targets[i] for i in chunk], pad_id, device,
                                   micro=len(chunk))
        else:
            values = _suffix_nll(model, [contexts[i] for i in chunk], [targets[i] for i in chunk],
                                 [prefixes[i] for i in chunk], [reuse[i] for i in chunk], pad_id, device)
        out[torch.tensor(chunk)] = values
    return out


def _suffix_nll(model, contexts, targets, prefixes, reuse, pad_id, device) -> torch.Tensor:
    """One forward of each row's context[m:] + target on its cache cut at m (m = 0: no cache, the full sequence).

    Layout per row, left to right: cache padding, the m cached positions, feed padding, the fed tokens; the
    attention mask is 1 on the cached and fed positions only and the fed tokens' positions continue from m.
    """
    from transformers import DynamicCache
    width_m = max(reuse)
    template = next(p for p, m in zip(prefixes, reuse) if m)
    seqs = [c[m:] + (t or [pad_id]) for c, m, t in zip(contexts, reuse, targets)]
    ids, fed_mask = left_pad(seqs, pad_id, device)
    cached_mask = torch.zeros((len(seqs), width_m), dtype=fed_mask.dtype, device=fed_mask.device)
    layers = []
    for layer in range(len(template.keys)):
        k0 = template.keys[layer]
        keys = k0.new_zeros((len(seqs), k0.shape[0], width_m, k0.shape[2]))
        values = torch.zeros_like(keys)
        for j, (p, m) in enumerate(zip(prefixes, reuse)):
            if m:
                keys[j, :, width_m - m:] = p.keys[layer][:, :m].to(keys.device)
                values[j, :, width_m - m:] = p.values[layer][:, :m].to(keys.device)
        layers.append((keys, values))
    for j, m in enumerate(reuse):
        if m:
            cached_mask[j, width_m - m:] = 1
    start = torch.tensor(reuse, device=fed_mask.device)[:, None]
    positions = start + (fed_mask.long().cumsum(-1) - 1).clamp(min=0)
    width = max(len(t) or 1 for t in targets)
    logits = model(input_ids=ids, attention_mask=torch.cat([cached_mask, fed_mask], dim=1), position_ids=positions,
                   past_key_values=DynamicCache(ddp_cache_data=layers), use_cache=True,
                   logits_to_keep=width + 1).logits[:, :-1, :].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, -width:].unsqueeze(-1)).squeeze(-1)
    out = torch.full((len(seqs),), float("nan"))
    for j, t in enumerate(targets):
        if t:
            out[j] = -logp[j, width - len(t):].mean().cpu()
    return out
