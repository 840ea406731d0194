"""Training-side log-probs: the response tokens' log-probs (and entropy) under the actor or the reference from one
forward over [prompt | response] (`response_logprobs`, what the loss differentiates; generation lives in
rl/rollout/samplers.py), and the length-sorted micro-batches, trimmed to their own padding, that every forward of the
update runs on, so that it skips most pad tokens.

A rollout batch is one [N, P + R] block: prompts left-padded to the longest prompt P, responses right-padded to the
longest response R. With responses of 16 tokens on average and 48 at most, two thirds of the response columns are
padding. Sorting the rows by length before cutting micro-batches puts short responses together, and each
micro-batch then drops the columns that are padding in all of its rows (verl's dynamic batch size does the same
with a token budget; here the number of micro-batches is fixed by DeepSpeed's gradient accumulation, except where
`keep` leaves rows out, below).
Token-level results are unchanged: only columns with no real token are dropped.

With `keep`, the rows a micro-batch would only multiply by a zero advantage are left out too (rl/update/ppo.py decides
which): `count` micro-batches (ppo.py asks for as few as the kept rows fill, the same on every rank), each a
near-equal share of the kept rows (at least one row, so every rank still runs every forward that ZeRO-3's parameter
gathering expects). With `rows`, only those rows are cut: one mini-batch of the update (--ppo_mini_batch_size), sorted
and trimmed on its own.
"""
from dataclasses import dataclass

import torch

from rewards.lm_tensors import entropy_from_logits, position_ids_from_mask  # noqa: F401 (re-exported)


def response_logprobs(model, input_ids, attention_mask, prompt_len: int, temperature: float, with_entropy: bool = False):
    """Log-probs of the response tokens under `model` (rollout temperature applied, as in sampling).

    Only the R + 1 last positions go through the LM head: the prompt's full-vocabulary logits are never built.

    Args:
        input_ids, attention_mask: Tensor[B, P + R]; prompt_len: P.
    Returns:
        (logp Tensor[B, R], entropy Tensor[B, R] detached or None)
    """
    resp_len = input_ids.shape[1] - prompt_len
    logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids_from_mask(attention_mask),
                   use_cache=False, logits_to_keep=resp_len + 1).logits[:, :-1, :]
    logits = logits.float() / temperature  # [B, R, V]: the largest activation of the step
    targets = input_ids[:, prompt_len:]
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():  # a few rows at a time: the softmax temporaries are as large as the logits
            entropy = torch.cat([entropy_from_logits(rows) for rows in logits.split(4)])
    return logp, entropy


@dataclass
class MicroBatch:
    rows: torch.Tensor  # Tensor[b] long, rows of the rollout batch
    first_col: int      # first column kept (the micro-batch's least left padding)
    prompt_len: int     # P minus the dropped left columns: where the response part starts in the trimmed rows
    resp_len: int       # response columns kept (through the last real token of the micro-batch)

    def sequences(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple:
        """The trimmed [b, prompt_len + resp_len] input_ids and attention_mask."""
        end = self.first_col + self.prompt_len + self.resp_len
        return input_ids[self.rows, self.first_col:end], attention_mask[self.rows, self.first_col:end]

    def response(self, tensor: torch.Tensor) -> torch.Tensor:
        """Rows and kept columns of a response-aligned Tensor[N, R, ...]; None stays None."""
        return None if tensor is None else tensor[self.rows, :self.resp_len]

    def of(self, batch) -> "MicroRollout":
        """This micro-batch's slice of every per-token tensor of a rl.types.Rollout (advantages per token)."""
        input_ids, attention_mask = self.sequences(batch.input_ids, batch.attention_mask)
        return MicroRollout(input_ids, attention_mask, self.prompt_len, self.response(batch.response_mask),
                            batch.token_advantages(self.rows)[:, :self.resp_len], self.response(batch.old_logp),
                            self.response(batch.ref_logp), self.response(batch.rollout_logp))


@dataclass
class MicroRollout:
    """The tensors one forward/backward of the update needs: b rows, trimmed to r response columns."""
    input_ids: torch.Tensor        # Tensor[b, prompt_len + r]
    attention_mask: torch.Tensor   # Tensor[b, prompt_len + r]
    prompt_len: int
    response_mask: torch.Tensor    # Tensor[b, r]
    advantages: torch.Tensor       # Tensor[b, r] per-token advantages
    old_logp: torch.Tensor = None  # Tensor[b, r] or None (then the current policy's, detached)
    ref_logp: torch.Tensor = None
    rollout_logp: torch.Tensor = None


def micro_batches(attention_mask: torch.Tensor, prompt_len: int, micro: int, keep: torch.Tensor = None,
                  rows: torch.Tensor = None, count: int = None) -> list:
    """n // micro micro-batches of `micro` rows, sorted by response extent (stable, so deterministic).

    Args:
        attention_mask: Tensor[N, P + R] (left-padded prompt, right-padded response part); prompt_len: P.
        keep: Tensor[N] bool or None: only these rows, spread over `count` micro-batches (default ceil(n / micro), as
            many as without `keep`; sizes differ by at most one; where fewer rows are kept than there are
            micro-batches, the shortest others fill in).
        count: with `keep`, how many micro-batches (1 .. ceil(n / micro)); ignored without it.
        rows: Tensor[n] long or None: cut only these rows of the batch (a mini-batch); None: all N rows.
    Returns:
        list of MicroBatch (rows indexed in the whole batch), covering every row of `rows` once (every kept one
        once, with `keep`).
    """
    rows = torch.arange(attention_mask.shape[0]) if rows is None else rows.cpu()
    n = len(rows)
    mask = attention_mask.bool().cpu()
    response = mask[:, prompt_len:]
    # response columns each row needs: through its last attended token (feedback turns included); R >= 1 always
    extent = torch.where(response, torch.arange(1, response.shape[1] + 1), 0).amax(dim=1)
    left_pad = (~mask[:, :prompt_len]).long().cumprod(dim=1).sum(dim=1)  # leading zeros of each prompt
    order = rows[torch.argsort((extent * (prompt_len + 1) + (prompt_len - left_pad))[rows], stable=True)]
    if keep is None:
        chunks = [order[start:start + micro] for start in range(0, n, micro)]
    else:
        most = -(-n // micro)  # as many micro-batches as without `keep`
        count = most if count is None else count
        if not 1 <= count <= most:
            raise ValueError(f"micro_batches: count {count} is outside 1 .. {most} for {n} rows of {micro}")
        keep = keep.bool().cpu().clone()
        if int(keep[rows].sum()) > count * micro:
            raise ValueError(f"micro_batches: {int(keep[rows].sum())} kept rows do not fit {count} micro-batches of "
                             f"{micro}")
        missing = count - int(keep[rows].sum())
        if missing > 0:  # every micro-batch needs a row: the shortest of the others fill in
            keep[order[~keep[order]][:missing]] = True
        chunks = list(torch.tensor_split(order[keep[order]], count))
    out = []
    for chunk in chunks:
        first = int(left_pad[chunk].min())
        out.append(MicroBatch(rows=chunk.to(attention_mask.device), first_col=first, prompt_len=prompt_len - first,
                              resp_len=max(int(extent[chunk].max()), 1)))
    return out


@torch.no_grad()
def batched_response_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int,
                              temperature: float, micro: int) -> torch.Tensor:
    """Response log-probs of a whole batch, `micro` rows per forward. Tensor[N, P + R] -> Tensor[N, R] (0 on
    padding). The same forwards on every rank for the same N (ZeRO-3 gathers parameters collectively)."""
    out = torch.zeros(input_ids.shape[0], input_ids.shape[1] - prompt_len, device=input_ids.device)
    for mb in micro_batches(attention_mask, prompt_len, micro):
        logp = response_logprobs(model, *mb.sequences(input_ids, attention_mask), mb.prompt_len, temperature)[0]
        out[mb.rows, :mb.resp_len] = logp.to(out.dtype)
    return out
