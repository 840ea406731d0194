"""Rows of several rollouts as one: what dynamic sampling (rl/rollout/dynamic_sampling.py) keeps from each of its rounds.

Each round lays its rows out with its own widths (prompts left-padded to that round's longest prompt, responses
right-padded to its longest response), so joining rounds re-pads: prompts on the left, response-aligned tensors on
the right. Only padding is added; every real token keeps its place relative to the prompt/response boundary.
"""
import torch
import torch.nn.functional as F

from rl.rollout.sampling_signals import SamplingSignals
from rl.types import Rollout

LIST_FIELDS = ("completions", "samples", "envs", "conversations", "env_values", "prompts")
ROW_FIELDS = ("group_ids", "turn_scores", "scores", "correctness", "policy_hidden")  # Tensor[N, ...], no padding
RESPONSE_FIELDS = {"response_mask": 0.0, "turn_ids": -1, "rollout_logp": 0.0, "old_logp": 0.0, "ref_logp": 0.0}


def join_rows(parts: list, pad_token_id: int) -> Rollout:
    """One Rollout of the chosen rows of several, in order.

    Args:
        parts: [(Rollout, Tensor[k] long row indices)], each from rl.rollout.episodes.run_episodes and scored (advantages and
            method extras are filled later and must still be empty).
        pad_token_id: the tokenizer's pad id, for the added prompt and response padding.
    """
    for batch, _ in parts:
        if batch.advantages is not None or batch.extras:
            raise ValueError("join_rows runs before a method's hooks: the rollouts must not have advantages or "
                             f"extras yet (got extras {sorted(batch.extras)})")
    width_p = max(b.prompt_len for b, _ in parts)
    width_r = max(b.response_mask.shape[1] for b, _ in parts)
    out = Rollout(input_ids=_sequences(parts, "input_ids", width_p, width_r, pad_token_id),
                  attention_mask=_sequences(parts, "attention_mask", width_p, width_r, 0),
                  response_mask=None, prompt_len=width_p, group_ids=None, completions=[], samples=[])
    for name, pad in RESPONSE_FIELDS.items():
        setattr(out, name, _responses(parts, name, width_r, pad))
    for name in ROW_FIELDS:
        values = [getattr(b, name) for b, _ in parts]
        if any(v is not None for v in values):
            setattr(out, name, torch.cat([v[rows.to(v.device)] for v, (_, rows) in zip(values, parts)]))
    for name in LIST_FIELDS:
        values = [getattr(b, name) for b, _ in parts]
        setattr(out, name, None if all(v is None for v in values) else
                [v[i] for v, (_, rows) in zip(values, parts) for i in rows.tolist()])
    out.components = _named_columns([(b.components, rows) for b, rows in parts])
    out.reward_raw = _named_columns([(b.reward_raw, rows) for b, rows in parts])
    out.signals = _signals(parts, width_r)
    return out


def _sequences(parts, name, width_p, width_r, pad):
    """Tensor[N, width_p + width_r]: each part's [prompt | response] block re-padded left and right."""
    blocks = []
    for b, rows in parts:
        t = getattr(b, name)
        t = t[rows.to(t.device)]
        blocks.append(F.pad(t, (width_p - b.prompt_len, width_r - (t.shape[1] - b.prompt_len)), value=pad))
    return torch.cat(blocks)


def _responses(parts, name, width_r, pad):
    """Tensor[N, width_r] of a response-aligned field, right-padded; None when no part has it."""
    values = [getattr(b, name) for b, _ in parts]
    if all(v is None for v in values):
        return None
    if any(v is None for v in values):
        raise ValueError(f"rollout field {name} is set in some rounds and not in others")
    return _padded_rows(values, parts, width_r, pad)


def _padded_rows(values, parts, width_r, pad):
    """Tensor[N, width_r]: each round's chosen rows of its Tensor[n, r] value, right-padded with pad."""
    return torch.cat([F.pad(v[rows.to(v.device)], (0, width_r - v.shape[1]), value=pad)
                      for v, (_, rows) in zip(values, parts)])


def _signals(parts, width_r):
    """The rounds' SamplingSignals (what the decode loop recorded) joined as their rows are: a signal only where every
    round has it, and None when a round has none. Dropping them would make the rollout correction weigh nothing
    (--vllm_is_correction reads the decode loop's log-probs) and TCPO / `ent` / the Conductor redo their forwards."""
    values = [b.signals for b, _ in parts]
    if any(v is None for v in values):
        return None
    out = SamplingSignals()
    for name in ("logp", "entropy"):
        if all(getattr(v, name) is not None for v in values):
            setattr(out, name, _padded_rows([getattr(v, name) for v in values], parts, width_r, 0.0))
    if all(v.last_hidden is not None for v in values):
        out.last_hidden = torch.cat([v.last_hidden[rows.to(v.last_hidden.device)] for v, (_, rows) in zip(values, parts)])
    if all(v.prefixes is not None for v in values):
        out.prefixes = [v.prefixes[i] for v, (_, rows) in zip(values, parts) for i in rows.tolist()]
    return out


def _named_columns(parts):
    """{name: Tensor[N]} over every part; a name a round lacks is 0 there, as the scorer fills a row's missing
    component (a dict-valued reward's keys are learned as they appear)."""
    names = list(dict.fromkeys(n for columns, _ in parts for n in columns))
    out = {}
    for n in names:
        out[n] = torch.cat([columns[n][rows.to(columns[n].device)] if n in columns else torch.zeros(len(rows))
                            for columns, rows in parts])
    return out
