"""Training-side log-probs: the response tokens' log-probs (and entropy) under the actor or the reference, from one
forward over [prompt | response]. Generation lives in rl/rollout/samplers.py; this is what the loss differentiates."""
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
