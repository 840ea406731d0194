"""What the sampling pass can record about the tokens it draws, so that later stages need no forward of their own.

The decode loop (rl/rollout/decode.py) already computes the policy's logits at every sampled position. From those logits:
- "logp": log softmax(logits / T) of the sampled token (TCPO's turn surprisal, rl/methods/tcpo_counterfactuals.py),
- "entropy": the entropy of softmax(logits / T) (the `ent` reward, rewards/policy_rewards.py),
- "hidden": the final hidden state after the trajectory's last token (the Conductor's input); the loop feeds each
  row's last token once more to get it (one extra decode position per row).
- "prefix_kv": each finished row's KV cache (rewards/prefix_nll.CachedPrefix), so that NOVER's `ppl` forwards only
  the tokens after it (the reasoning's end, the answer) instead of the whole sequence again. It is held until the
  rewards are scored (PolicyRewards drops it then): at most the decode batch's own cache memory.
T is the rollout temperature and the logits are the raw ones, before top-k / top-p: exactly what a no-grad forward
over [prompt | response] computes (rl/logprobs.response_logprobs, rewards/policy_signals.entropy_and_last_hidden),
so the values agree within float tolerance (tests/rollout/test_sampling_signals.py) and the rest of the maths is unchanged.

A consumer reads `batch.signals` and falls back to its own forward where it is None: samplers that do not run
credo's decode loop (vLLM, HF generate, the hybrid engine) record nothing.
"""
from dataclasses import dataclass

import torch

SIGNALS = ("logp", "entropy", "hidden", "prefix_kv")


def check_signals(names) -> frozenset:
    names = frozenset(names)
    unknown = sorted(names - set(SIGNALS))
    if unknown:
        raise ValueError(f"unknown sampling signals {unknown}; choose from {SIGNALS}")
    return names


def token_logp_entropy(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> tuple:
    """Log-prob of the drawn tokens and entropy, both under softmax(logits / T) (T <= 0, greedy: T = 1).

    logits: Tensor[B, V] raw; tokens: Tensor[B] long. Returns (Tensor[B], Tensor[B]) float32.
    """
    scaled = logits.float() / (temperature if temperature > 0 else 1.0)
    logz = torch.logsumexp(scaled, dim=-1)
    logp = scaled.gather(-1, tokens[:, None]).squeeze(-1) - logz
    entropy = logz - (torch.softmax(scaled, dim=-1) * scaled).sum(-1)  # rewards.lm_tensors.entropy_from_logits
    return logp, entropy


@dataclass
class TurnSignals:
    """One row of one generate call: per drawn token (aligned with the row's tokens), and the final hidden state."""
    logp: list = None              # floats, or None when not recorded
    entropy: list = None
    hidden: torch.Tensor = None    # Tensor[H] float32 after the row's last token, or None
    prefix: object = None          # rewards.prefix_nll.CachedPrefix of the row's context + response, or None


@dataclass
class SamplingSignals:
    """A rollout's recorded signals, aligned with its response part (rl.types.Rollout)."""
    logp: torch.Tensor = None      # Tensor[N, R], 0 off the model's tokens
    entropy: torch.Tensor = None   # Tensor[N, R], 0 off the model's tokens
    last_hidden: torch.Tensor = None  # Tensor[N, H] after each trajectory's last token (its last model turn's)
    prefixes: list = None          # N CachedPrefix (or None) of each trajectory's last model turn

    def select(self, rows) -> "SamplingSignals":
        """The signals of some rows (a LongTensor or list of row indices), for code that filters a rollout's rows
        (it must select these too: stale rows would give other trajectories' surprisal or entropy)."""
        pick = lambda t: None if t is None else t[torch.as_tensor(rows, device=t.device)]  # noqa: E731
        prefixes = None if self.prefixes is None else [self.prefixes[int(i)] for i in torch.as_tensor(rows).tolist()]
        return SamplingSignals(pick(self.logp), pick(self.entropy), pick(self.last_hidden), prefixes)


def checked_signals(batch):
    """batch.signals, refused by name when they no longer match the batch's response part (rows filtered or padded
    without them): a silent mismatch would credit one trajectory with another's surprisal."""
    signals = getattr(batch, "signals", None)
    if signals is None:
        return None
    shape = tuple(batch.response_mask.shape)
    for name in ("logp", "entropy"):
        value = getattr(signals, name)
        if value is not None and tuple(value.shape) != shape:
            raise ValueError(f"batch.signals.{name} is {tuple(value.shape)} but the rollout's responses are {shape}: "
                             "code that changes a Rollout's rows must change its signals too (SamplingSignals.select)")
    if signals.last_hidden is not None and signals.last_hidden.shape[0] != shape[0]:
        raise ValueError(f"batch.signals.last_hidden has {signals.last_hidden.shape[0]} rows for {shape[0]} responses")
    if signals.prefixes is not None and len(signals.prefixes) != shape[0]:
        raise ValueError(f"batch.signals.prefixes has {len(signals.prefixes)} rows for {shape[0]} responses")
    return signals


def layout_signals(segments: list, signals: list, width_r: int, device):
    """SamplingSignals from the episode driver's per-row segments [(tokens, turn or -1)] and per-segment
    TurnSignals (None on feedback segments), or None when some model segment has none (a consumer then does its
    own forward). A signal is laid out only if every model segment recorded it."""
    model_segments = [sig for row in signals for sig in row if sig is not None]
    if not model_segments or len(model_segments) != sum(k >= 0 for row in segments for _, k in row):
        return None
    out = SamplingSignals()
    for name in ("logp", "entropy"):
        if any(getattr(sig, name) is None for sig in model_segments):
            continue
        values = torch.zeros((len(segments), width_r))
        for i, (segs, sigs) in enumerate(zip(segments, signals)):
            pos = 0
            for (tokens, _), sig in zip(segs, sigs):
                if sig is not None and tokens:
                    values[i, pos:pos + len(tokens)] = torch.tensor(getattr(sig, name), dtype=torch.float32)
                pos += len(tokens)
        setattr(out, name, values.to(device))
    last = [next((sig.hidden for sig in reversed(sigs) if sig is not None), None) for sigs in signals]
    if all(h is not None for h in last):
        out.last_hidden = torch.stack(last).float()
    if any(sig.prefix is not None for sig in model_segments):
        # the last model turn's cache (its context is the whole trajectory before it); a consumer checks its tokens
        out.prefixes = [next((sig.prefix for sig in reversed(sigs) if sig is not None), None) for sigs in signals]
    return out
