"""Batched sampling from an HF causal LM with a KV cache, dropping sequences from the batch as they finish.

Why not `model.generate`: on a CPU a decode step of a small model grows with the number of rows in the batch
(SmolLM2-135M, 2 cores, a one-off profile of 48 forced tokens: 276 ms at 32 rows, 91 ms at 4), and HF generate
keeps every row until the longest response ends, so a batch with a mean response of 16 tokens and a max of 48
pays for 48 x 32 rows.
HF also samples with `torch.multinomial`, which draws one exponential per vocabulary entry (50 ms per step for
32 x 49152 here); inverse-CDF sampling draws one uniform per row from the same distribution.

The logits warpers are transformers' own (temperature, top-k, top-p, in HF generate's order), so a response is
drawn from the distribution HF generate would sample from. Greedy decoding (temperature 0) is argmax.
Measured in benchmarks/results/decode_loop.md.
"""
import torch


def logits_warpers(temperature: float, top_k, top_p):
    """HF's LogitsProcessorList for sampling at these settings (what `generate(do_sample=True, ...)` builds)."""
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
    warpers = LogitsProcessorList()
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


def sample_from_logits(logits: torch.Tensor, generator=None) -> torch.Tensor:
    """One token per row from softmax(logits), by inverse CDF: one uniform per row.

    Tokens whose logit is -inf (cut by top-k / top-p) have zero width in the CDF and are never drawn.

    Args:
        logits: Tensor[B, V] (already warped).
    Returns:
        Tensor[B] long.
    """
    probs = torch.softmax(logits.float(), dim=-1)
    cdf = probs.cumsum(dim=-1)
    # u in [0, total): scaling by the row's own total absorbs the cumsum's rounding (total may be 1 - 1e-7)
    u = torch.rand(logits.shape[0], 1, generator=generator, device=logits.device) * cdf[:, -1:]
    picked = torch.searchsorted(cdf, u, right=True).squeeze(-1)  # first index whose CDF exceeds u
    return picked.clamp(max=logits.shape[-1] - 1)


@torch.no_grad()
def sample_batch(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, eos_token_ids,
                 temperature: float, top_k=None, top_p=None) -> list:
    """Sample a response for every row of a left-padded batch.

    Args:
        model: an HF causal LM (full weights; see rl.engine.generation_model for ZeRO-3).
        input_ids, attention_mask: Tensor[B, P], left-padded prompts.
        eos_token_ids: ids that end a response (the EOS is kept in it).
        temperature: 0 = greedy; else sample with the warpers above.
    Returns:
        B token lists, each through its first EOS or cut at max_new_tokens.
    """
    from transformers import DynamicCache
    warpers = logits_warpers(temperature, top_k, top_p) if temperature > 0 else None
    eos = torch.tensor(sorted(set(eos_token_ids)), device=input_ids.device)
    responses = [[] for _ in range(input_ids.shape[0])]
    live = torch.arange(input_ids.shape[0], device=input_ids.device)  # original row of each batch row
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    next_position = positions[:, -1:] + 1
    for step in range(max_new_tokens):
        logits = out.logits[:, -1, :].float()
        tokens = logits.argmax(-1) if warpers is None else sample_from_logits(warpers(None, logits))
        for row, token in zip(live.tolist(), tokens.tolist()):
            responses[row].append(token)
        running = ~torch.isin(tokens, eos)
        if step == max_new_tokens - 1 or not bool(running.any()):
            break
        if not bool(running.all()):  # drop finished rows from the batch and from every layer's cache
            keep = running.nonzero().squeeze(-1)
            cache.reorder_cache(keep)
            live, tokens = live[keep], tokens[keep]
            attention_mask, next_position = attention_mask[keep], next_position[keep]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(attention_mask.shape[0], 1)], dim=-1)
        out = model(input_ids=tokens[:, None], attention_mask=attention_mask, position_ids=next_position,
                    past_key_values=cache, use_cache=True)
        next_position = next_position + 1
    return responses
