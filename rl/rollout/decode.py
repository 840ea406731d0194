"""Batched sampling from an HF causal LM with a KV cache, dropping sequences from the batch as they finish.

Why not `model.generate`: on a CPU a decode step of a small model grows with the number of rows in the batch
(SmolLM2-135M, 2 cores, a one-off profile of 48 forced tokens: 276 ms at 32 rows, 91 ms at 4), and HF generate
keeps every row until the longest response ends, so a batch with a mean response of 16 tokens and a max of 48
pays for 48 x 32 rows.
HF also samples with `torch.multinomial`, which draws one exponential per vocabulary entry (50 ms per step for
32 x 49152 here); inverse-CDF sampling draws one uniform per row from the same distribution.

Identical contexts (a prompt's G samples at the first turn, TCPO's alternatives of one turn) are prefilled once,
their KV-cache rows copied. The loop can also record, per sampled token, what later stages would otherwise recompute
with a forward (rl/rollout/sampling_signals.py).

The logits warpers are transformers' own (temperature, top-k, top-p, in HF generate's order), so a response is
drawn from the distribution HF generate would sample from. Greedy decoding (temperature 0) is argmax.
On a CPU in bf16/fp16 the one-token steps attend through rl/engine/decode_attention.py (two fp32 matmuls instead of
torch's CPU SDPA kernel, which is slow at that shape); `attention="sdpa"` (--decode_attention sdpa) keeps the model's
own. Measured in benchmarks/results/decode_loop.md and rollout_engines.md.
"""
import contextlib

import torch

ATTENTIONS = ("one_query", "sdpa")  # --decode_attention


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


def _prefill(model, cache, input_ids, attention_mask, positions) -> torch.Tensor:
    """Run the contexts into `cache`; Tensor[B, V] logits of each row's next token.

    Identical contexts (a prompt's G samples at the first turn, TCPO's alternatives of one turn) go through the
    model once and their cache rows are copied: on a CPU the prefill is the costly part of a short turn.
    """
    unique, inverse = torch.unique(torch.cat([input_ids, attention_mask], dim=1), dim=0, return_inverse=True)
    if len(unique) == len(input_ids):
        return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, past_key_values=cache,
                     use_cache=True, logits_to_keep=1).logits[:, -1, :]
    # one row of the batch per distinct context (any of its copies: they are equal)
    first = torch.zeros(len(unique), dtype=torch.long, device=input_ids.device).scatter_(
        0, inverse, torch.arange(len(input_ids), device=input_ids.device))
    logits = model(input_ids=input_ids[first], attention_mask=attention_mask[first], position_ids=positions[first],
                   past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1, :]
    cache.reorder_cache(inverse)  # the cache's rows back in the batch's order, copies included
    return logits[inverse]


@torch.no_grad()
def sample_batch(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, eos_token_ids,
                 temperature: float, top_k=None, top_p=None, attention: str = "one_query") -> list:
    """Sample a response for every row of a left-padded batch.

    Args:
        model: an HF causal LM (full weights; see rl.engine.actor.generation_model for ZeRO-3).
        input_ids, attention_mask: Tensor[B, P], left-padded prompts.
        eos_token_ids: ids that end a response (the EOS is kept in it).
        temperature: 0 = greedy; else sample with the warpers above.
        attention: "one_query" (rl/engine/decode_attention.py where it applies: CPU, bf16/fp16) or "sdpa" (the
            model's own attention throughout).
    Returns:
        B token lists, each through its first EOS or cut at max_new_tokens.
    """
    return sample_batch_with_signals(model, input_ids, attention_mask, max_new_tokens, eos_token_ids, temperature,
                                     top_k, top_p, attention=attention)[0]


@torch.no_grad()
def sample_batch_with_signals(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                              eos_token_ids, temperature: float, top_k=None, top_p=None, signals=frozenset(),
                              attention: str = "one_query") -> tuple:
    """sample_batch, also recording rl/rollout/sampling_signals.py's `signals` ("logp", "entropy", "hidden", "prefix_kv")
    per row.

    The same random draws as without signals (one uniform per running row and step), so a seeded run samples the
    same tokens either way. Returns (B token lists, B TurnSignals or None when no signal was asked for).
    """
    if attention not in ATTENTIONS:
        raise ValueError(f"attention={attention!r}: one of {ATTENTIONS}")
    with _attention(model, attention):
        return _sample_loop(model, input_ids, attention_mask, max_new_tokens, eos_token_ids, temperature, top_k,
                            top_p, signals)


def _attention(model, attention: str):
    """The one-token steps' attention for this call: rl/engine/decode_attention.py where it can apply (a CPU model in
    bf16 or fp16), else the model's own (the module is not entered: fp32 and GPU decoding run as they always did)."""
    param = next(model.parameters(), None)
    if attention != "one_query" or param is None or param.device.type != "cpu" \
            or param.dtype not in (torch.bfloat16, torch.float16):
        return contextlib.nullcontext()
    from rl.engine.decode_attention import decoding_attention
    return decoding_attention(model)


def _sample_loop(model, input_ids, attention_mask, max_new_tokens, eos_token_ids, temperature, top_k, top_p,
                 signals) -> tuple:
    from transformers import DynamicCache

    from rl.rollout.sampling_signals import TurnSignals, check_signals, token_logp_entropy
    signals = check_signals(signals)
    scores, want_hidden = bool(signals & {"logp", "entropy"}), "hidden" in signals
    # "prefix_kv": each row's context (unpadded), whose cache is kept with the row's response when it finishes
    contexts = [input_ids[i][attention_mask[i].bool()].tolist() for i in range(len(input_ids))] \
        if "prefix_kv" in signals else None
    warpers = logits_warpers(temperature, top_k, top_p) if temperature > 0 else None
    eos = torch.tensor(sorted(set(eos_token_ids)), device=input_ids.device)
    responses = [[] for _ in range(input_ids.shape[0])]
    recorded = [TurnSignals(logp=[] if "logp" in signals else None, entropy=[] if "entropy" in signals else None)
                for _ in responses]
    live = torch.arange(input_ids.shape[0], device=input_ids.device)  # original row of each batch row
    positions = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    next_logits = _prefill(model, cache, input_ids, attention_mask, positions)
    next_position = positions[:, -1:] + 1
    for step in range(max_new_tokens):
        logits = next_logits.float()
        tokens = logits.argmax(-1) if warpers is None else sample_from_logits(warpers(None, logits))
        for row, token in zip(live.tolist(), tokens.tolist()):
            responses[row].append(token)
        if scores:  # of the raw logits at the rollout temperature, as the training forward computes them
            logp, entropy = token_logp_entropy(logits, tokens, temperature)
            for row, lp, ent in zip(live.tolist(), logp.tolist(), entropy.tolist()):
                if recorded[row].logp is not None:
                    recorded[row].logp.append(lp)
                if recorded[row].entropy is not None:
                    recorded[row].entropy.append(ent)
        running = ~torch.isin(tokens, eos)
        last_step = step == max_new_tokens - 1 or not bool(running.any())
        if want_hidden:
            # Every row's new token goes through the model, the finished rows' too: the hidden state after a
            # row's last token is what "hidden" records. Finished rows leave the batch after this forward.
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(attention_mask.shape[0], 1)], dim=-1)
            out = model(input_ids=tokens[:, None], attention_mask=attention_mask, position_ids=next_position,
                        past_key_values=cache, use_cache=True, output_hidden_states=True)
            final = out.hidden_states[-1][:, -1]  # after the final norm (HF convention), as entropy_and_last_hidden
            for j in (range(len(live)) if last_step else (~running).nonzero().squeeze(-1).tolist()):
                recorded[int(live[j])].hidden = final[j].float().cpu()
            if contexts is not None:  # the cache now covers each finished row's last token too
                _keep_prefixes(cache, attention_mask, live, running, last_step, contexts, responses, recorded, 0)
            if last_step:
                break
            if not bool(running.all()):
                keep = running.nonzero().squeeze(-1)
                cache.reorder_cache(keep)
                live, attention_mask, next_position = live[keep], attention_mask[keep], next_position[keep]
                next_logits = out.logits[keep, -1, :]
            else:
                next_logits = out.logits[:, -1, :]
            next_position = next_position + 1
            continue
        if contexts is not None:  # the token just drawn has not been fed: the cache ends before it
            _keep_prefixes(cache, attention_mask, live, running, last_step, contexts, responses, recorded, 1)
        if last_step:
            break
        if not bool(running.all()):  # drop finished rows from the batch and from every layer's cache
            keep = running.nonzero().squeeze(-1)
            cache.reorder_cache(keep)
            live, tokens = live[keep], tokens[keep]
            attention_mask, next_position = attention_mask[keep], next_position[keep]
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(attention_mask.shape[0], 1)], dim=-1)
        out = model(input_ids=tokens[:, None], attention_mask=attention_mask, position_ids=next_position,
                    past_key_values=cache, use_cache=True)
        next_logits = out.logits[:, -1, :]
        next_position = next_position + 1
    return responses, (recorded if signals else None)


def _keep_prefixes(cache, attention_mask, live, running, last_step, contexts, responses, recorded, unfed):
    """Record the cache of the rows that finish now (every live row at the last step) as their "prefix_kv": their
    context and response but the last `unfed` tokens, which the cache does not hold yet."""
    from rewards.prefix_nll import CachedPrefix
    finishing = range(len(live)) if last_step else (~running).nonzero().squeeze(-1).tolist()
    for j in finishing:
        row = int(live[j])
        response = responses[row][:len(responses[row]) - unfed]
        recorded[row].prefix = CachedPrefix.from_cache(cache, j, attention_mask[j], contexts[row] + response)
