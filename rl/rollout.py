"""Rollout: chat prompts -> sampled responses from the actor -> a Rollout record; and response log-probs."""
import time

import torch

from rewards.lm_tensors import entropy_from_logits, left_pad, position_ids_from_mask
from rl.decode import sample_batch
from rl.engine import hybrid_engine_active, generation_model


def encode_prompts(tokenizer, conversations: list, max_prompt_seq_len: int):
    """Left-padded chat-template encoding. Over-long prompts keep their end (where the question is).

    Returns (input_ids Tensor[B, P], attention_mask Tensor[B, P]).
    """
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    enc = tokenizer(texts, padding=True, truncation=True, max_length=max_prompt_seq_len, add_special_tokens=False,
                    return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def response_mask_from_ids(response_ids: torch.Tensor, eos_token_ids) -> torch.Tensor:
    """1 on generated tokens up to and including the first EOS, 0 after. Tensor[B, R] long -> Tensor[B, R] float."""
    is_eos = torch.zeros_like(response_ids, dtype=torch.bool)
    for eos in eos_token_ids:
        is_eos |= response_ids == eos
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # EOS tokens strictly before each position
    return (eos_before == 0).float()


def eos_ids(tokenizer, model_config) -> list:
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model_config, "generation_config", None), "eos_token_id", None)
    for e in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]):
        if e is not None:
            ids.add(e)
    return sorted(i for i in ids if i is not None)


def make_rollout_backend(args, engine):
    """The one place the rollout backend is chosen (--rollout_backend).

    hf: None, generation stays on the actor (gather ZeRO-3 once, HF generate; or DeepSpeed's hybrid engine).
    vllm: a colocated `rl.rollout_vllm.VLLMRollout`, attached to the engine so that every `sample_turn` on it
    (episodes, TCPO counterfactuals) generates with vLLM.
    """
    if getattr(args, "rollout_backend", "hf") == "hf":
        return None
    from rl.engine import resolve_dtype
    from rl.rollout_vllm import VLLMRollout
    backend = VLLMRollout(args, engine, resolve_dtype(args.dtype))
    engine.credo_rollout_backend = backend
    return backend


@torch.no_grad()
def lockstep(engine) -> bool:
    """True when every rank must make the same generate/forward calls: a DeepSpeed engine (ZeRO-3 gathers
    parameters collectively) on several ranks. A plain module (eval.py, even under the launcher) never waits."""
    from rl import dist
    return hasattr(engine, "module") and dist.world_size() > 1


def sample_turn(engine, tokenizer, contexts: list, args, timings: dict) -> list:
    """B token lists: each response through its first EOS (or cut at --max_answer_seq_len); see below."""
    return sample_turn_with_logprobs(engine, tokenizer, contexts, args, timings)[0]


@torch.no_grad()
def sample_turn_with_logprobs(engine, tokenizer, contexts: list, args, timings: dict) -> tuple:
    """One batched, sampled generate over every live trajectory's context (one ZeRO-3 gather for all).

    Args:
        contexts: B token lists (prompt and history so far).
    Returns:
        (B token lists: each response through its first EOS (or cut at --max_answer_seq_len),
         B lists of the sampler's log-probs of those tokens with the vLLM backend, else None)
    """
    eos = eos_ids(tokenizer, getattr(engine, 'module', engine))
    backend = getattr(engine, "credo_rollout_backend", None)
    if backend is not None:
        t0, synced_before = time.perf_counter(), backend.sync_seconds
        tokens, logps = backend.generate(contexts, eos)
        sync = backend.sync_seconds - synced_before  # weight loading counts as "gather", as on the HF path
        timings["gather"] = timings.get("gather", 0.0) + sync
        timings["generate"] = timings.get("generate", 0.0) + time.perf_counter() - t0 - sync
        return tokens, logps
    idle = not contexts
    if idle:
        if not lockstep(engine):
            return [], None
        # Nothing live on this rank, but the others generate, and under ZeRO-3 generation is collective (the
        # parameter gather; with --decode_loop hf_generate also HF's synced_gpus loop): join with a dummy.
        contexts = [[tokenizer.pad_token_id]]
    ids, mask = left_pad(contexts, tokenizer.pad_token_id, engine.device)
    t0 = time.perf_counter()
    with generation_model(engine) as model:
        t1 = time.perf_counter()
        was_training = model.training
        model.eval()
        if getattr(args, "decode_loop", "credo") == "credo" and not hybrid_engine_active(engine):
            # temperature 0 = greedy (evaluation); training always samples (--temperature > 0 is enforced)
            responses = sample_batch(model, ids, mask, args.max_answer_seq_len, eos, args.temperature,
                                     top_k=args.top_k or None, top_p=args.top_p)
        else:
            responses = _hf_generate(model, ids, mask, eos, tokenizer.pad_token_id, args, lockstep(engine))
        model.train(was_training)
        t2 = time.perf_counter()
    timings["gather"] = timings.get("gather", 0.0) + (t1 - t0) + (time.perf_counter() - t2)
    timings["generate"] = timings.get("generate", 0.0) + (t2 - t1)
    if idle:
        return [], None
    return responses, None


def _hf_generate(model, ids, mask, eos, pad_token_id, args, synced_gpus: bool) -> list:
    """The same responses from transformers' `generate` (--decode_loop hf_generate; DeepSpeed's hybrid engine)."""
    sampling = dict(do_sample=True, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or None) \
        if args.temperature > 0 else dict(do_sample=False, temperature=None, top_p=None, top_k=None)
    sequences = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.max_answer_seq_len,
                               pad_token_id=pad_token_id, eos_token_id=eos, use_cache=True, synced_gpus=synced_gpus,
                               **sampling)
    new = sequences[:, ids.shape[1]:]
    keep = response_mask_from_ids(new, eos).sum(-1).long().tolist()
    return [new[i, :keep[i]].tolist() for i in range(len(ids))]


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
