"""The supervised loss: token-level negative log-likelihood on the trained (assistant) tokens, and the micro-batch
layout it is computed on."""
import torch


def collate(rows: list, pad_token_id: int) -> dict:
    """Right-padded tensors of a micro-batch of examples (or packed rows).

    rows: [{"input_ids", "loss_mask", optional "position_ids"}] lists. Returns input_ids, loss_mask and position_ids,
    each Tensor[B, T] (T = the longest row). Positions restart at each packed example and run on through the padding,
    so the model, given no attention mask, attends causally within each example only (transformers' packed-sequence
    mask) and no real token ever sees a pad."""
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.float32)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r["input_ids"])
        ids[i, :n] = torch.tensor(r["input_ids"])
        mask[i, :n] = torch.tensor(r["loss_mask"], dtype=torch.float32)
        pos = r.get("position_ids") or list(range(n))
        positions[i, :n] = torch.tensor(pos)
        positions[i, n:] = torch.arange(pos[-1] + 1, pos[-1] + 1 + width - n) if n else torch.arange(width)
    return {"input_ids": ids, "loss_mask": mask, "position_ids": positions}


def trained_targets(batch: dict) -> torch.Tensor:
    """Tensor[B, T - 1]: 1 where token t + 1 carries the loss. A token that starts an example (position 0) would be
    predicted from the previous packed example (or from nothing): never trained."""
    return batch["loss_mask"][:, 1:] * (batch["position_ids"][:, 1:] != 0)


def token_nll_sum(model, batch: dict) -> tuple:
    """(sum of -log p(token) over the trained tokens, their count) for one micro-batch under `model`.

    Token t is predicted from the logits at t - 1; a trained token at its example's position 0 has no context (in a
    packed row, only the previous example's) and is not counted.
    Only the positions from the first trained token on go through the LM head (`logits_to_keep`): a long prompt's
    full-vocabulary logits are never built.

    batch: collate's dict of Tensor[B, T]. Returns (Tensor[] with grad, Tensor[] float)."""
    ids, positions = batch["input_ids"], batch["position_ids"]
    targets_mask = trained_targets(batch)
    trained_cols = targets_mask.any(dim=0).nonzero()
    first = int(trained_cols[0]) if len(trained_cols) else targets_mask.shape[1] - 1  # first target column
    keep = ids.shape[1] - first  # logits at positions first .. T-1 (the last predicts past the end)
    logits = model(input_ids=ids, position_ids=positions, use_cache=False, logits_to_keep=keep).logits[:, :-1, :]
    logits = logits.float()
    targets = ids[:, first + 1:]
    nll = torch.logsumexp(logits, dim=-1) - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # [B, T - 1 - first]
    weights = targets_mask[:, first:].to(nll.device)
    return (nll * weights).sum(), weights.sum()
