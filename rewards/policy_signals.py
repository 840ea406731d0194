"""Rewards computed with the policy itself (no extra model): MAESTRO's `ppl` and `ent`, and the Conductor's input.

- `ppl` (NOVER, Liu et al. 2025, arXiv 2505.16022): the policy's mean negative log-likelihood of the *reference
  answer*, given the prompt and the response's reasoning part, divided by NOVER's length factor
  N(|t|) = max(1, 1 + log |t|) (|t| = reasoning tokens): the log of NOVER's reasoning perplexity P_r. Lower P_r is
  better, so the reward is its negative (rank-normalised within the group by rewards/policy_rewards.py).
- `ent`: the mean token entropy of the response under the policy (at the rollout temperature); as a reward its
  negative (rewards/policy_rewards.py says why).
- the final-layer hidden state of the last real token of prompt + response (the Conductor's input h).

Each takes a model (a DeepSpeed engine or a plain HF causal LM) and token tensors, so it can be used on its own.
"""
import math

import torch

from rewards.length import reasoning_part
from rewards.lm_tensors import entropy_from_logits, left_pad, position_ids_from_mask

# How the reference answer is appended after the reasoning, per --format_style (the answer part the policy writes):
# (text between the reasoning and the answer, text after the answer).
ANSWER_WRAPPERS = {"boxed": (" \\boxed{", "}"), "tags": ("</think>\n<answer>", "</answer>")}
THINK_CLOSE = "</think>"


@torch.no_grad()
def entropy_and_last_hidden(model, input_ids, attention_mask, prompt_len: int, response_mask, temperature: float,
                            micro: int = 16):
    """Mean response-token entropy and the final hidden state of the last real token.

    Args:
        input_ids, attention_mask: Tensor[N, P + R] (left-padded prompt, right-padded response); prompt_len: P.
        response_mask: Tensor[N, R] float, 1 on model tokens.
    Returns:
        (entropy Tensor[N] float32, hidden Tensor[N, H] float32), both on CPU.
    """
    entropies, hiddens = [], []
    resp_len = input_ids.shape[1] - prompt_len
    for s in range(0, input_ids.shape[0], micro):
        ids, mask = input_ids[s:s + micro], attention_mask[s:s + micro]
        out = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=False,
                    output_hidden_states=True, logits_to_keep=resp_len + 1)
        ent = entropy_from_logits(out.logits[:, :-1, :].float() / temperature)
        entropies.append(mean_over_mask(ent, response_mask[s:s + micro]))
        last = mask.shape[1] - 1 - mask.flip(1).long().argmax(1)  # index of the last 1 in each row
        final = out.hidden_states[-1]                                # after the final norm (HF convention)
        hiddens.append(final[torch.arange(len(ids), device=final.device), last.to(final.device)].float().cpu())
    return torch.cat(entropies), torch.cat(hiddens)


def mean_over_mask(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-row mean of values over the mask's ones (0 for a row without any). Tensor[N, R] x2 -> Tensor[N] float32
    on CPU."""
    mask = mask.to(values.device, values.dtype)
    return ((values * mask).sum(1) / mask.sum(1).clamp(min=1)).float().cpu()


def nover_tokens(tokenizer, prompt_ids: list, completion: str, answer, style: str = "boxed"):
    """(context token list, target token list) for the NLL of `answer` after the response's reasoning part."""
    context, target, _ = nover_example(tokenizer, prompt_ids, completion, answer, style)
    return context, target


def nover_example(tokenizer, prompt_ids: list, completion: str, answer, style: str = "boxed"):
    """(context token list, target token list, reasoning token count |t|) for NOVER's reasoning perplexity.

    The context is the prompt, the response's reasoning, then the answer's opening (`\\boxed{`, or
    `</think>\n<answer>` for --format_style tags); the target is the reference answer and its closing. Under tags the
    reasoning part already ends with the response's own `</think>`: it is dropped there, so the context closes the
    reasoning once (`...</think>\n<answer>`, never `...</think> </think>\n<answer>`). The target is empty when there
    is no reference answer (the reward then abstains).
    """
    opening, closing = ANSWER_WRAPPERS.get(style, ANSWER_WRAPPERS["boxed"])
    reasoning = reasoning_part(completion).rstrip()
    if opening.startswith(THINK_CLOSE) and reasoning.endswith(THINK_CLOSE):
        reasoning = reasoning[:-len(THINK_CLOSE)].rstrip()
    reasoning_ids = tokenizer(reasoning, add_special_tokens=False)["input_ids"] if reasoning else []
    if answer is None or str(answer).strip() == "":
        return list(prompt_ids), [], len(reasoning_ids)
    context = tokenizer(reasoning + opening, add_special_tokens=False)["input_ids"]
    target = tokenizer(str(answer).strip() + closing, add_special_tokens=False)["input_ids"]
    return list(prompt_ids) + context, target, len(reasoning_ids)


def nover_length_factor(reasoning_tokens: int) -> float:
    """NOVER's N(|t|) = max(1, 1 + log |t|): it divides the answer's mean NLL so long reasoning is not favoured."""
    return max(1.0, 1.0 + math.log(reasoning_tokens)) if reasoning_tokens > 0 else 1.0


@torch.no_grad()
def reference_nll(model, contexts: list, targets: list, pad_id: int, device, micro: int = 16) -> torch.Tensor:
    """Mean NLL of each target token list after its context. Returns Tensor[N] float32 (NaN for an empty target).

    Sequences are left-padded so that every target ends at the last position: only the last max-target + 1
    positions go through the LM head. Every row takes part in a forward, even one without a target, so that all
    ranks of a ZeRO-3 engine make the same number of forward calls (each call gathers parameters collectively).
    """
    out = torch.full((len(contexts),), float("nan"))
    for s in range(0, len(contexts), micro):
        chunk = range(s, min(s + micro, len(contexts)))
        seqs = [contexts[i] + (targets[i] or [pad_id]) for i in chunk]
        ids, mask = left_pad(seqs, pad_id, device)
        width = max(len(targets[i]) or 1 for i in chunk)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask), use_cache=False,
                       logits_to_keep=width + 1).logits[:, :-1, :].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, -width:].unsqueeze(-1)).squeeze(-1)
        for j, i in enumerate(chunk):
            if targets[i]:
                out[i] = -logp[j, width - len(targets[i]):].mean().cpu()
    return out
