"""TCPO's fixed-history counterfactuals: for the most surprising non-improving turns, sample alternatives from
the same history and compare the turn's score with theirs.

cf[i, k] = r[i, k] - mean(score of M alternatives for turn k of trajectory i), left NaN when the alternatives all
scored the same (no information) or the turn was not selected. Selection is per rank: the --tcpo_cf_budget
eligible turns (non-improving and before success, as rl/advantages/tcpo.py defines them) of this rank's batch with
the highest surprisal (mean NLL of the turn's tokens under the rollout policy, from the log-probs the sampling pass
recorded), or random ones for the ablation. The alternatives of every chosen turn are drawn in one batched generate.
"""
import random
import time

import torch

from rl.engine import dist
from rl.advantages.tcpo import eligible_turns
from rl.update.batching import batched_response_logprobs
from rl.rollout.sampling_signals import checked_signals


def turn_surprisal(logp: torch.Tensor, turn_ids: torch.Tensor, num_turns: int) -> torch.Tensor:
    """Mean negative log-likelihood of each turn's model tokens. logp, turn_ids: Tensor[N, R] on any device ->
    Tensor[N, T] on the CPU, beside the turn scores it is ranked with (on CUDA the mask and the NaN fill met on two
    devices before: the first GPU run of TCPO failed here)."""
    logp, turn_ids = logp.float().cpu(), turn_ids.cpu()
    out = torch.full((logp.shape[0], num_turns), float("nan"))
    for k in range(num_turns):
        mask = (turn_ids == k).float()
        count = mask.sum(1)
        nll = -(logp * mask).sum(1) / count.clamp(min=1)
        out[:, k] = torch.where(count > 0, nll, torch.tensor(float("nan")))
    return out


def rollout_logprobs(engine, batch, temperature: float) -> torch.Tensor:
    """Tensor[N, R] log-probs of the response tokens under the rollout policy: the ones the sampling pass recorded
    (batch.signals, rl/rollout/sampling_signals.py: no extra forward), or vLLM's (batch.rollout_logp), else a no-grad
    forward of the actor. Either way on every rank of a ZeRO-3 run alike (the same sampler everywhere), so no rank
    waits in a collective alone."""
    signals = checked_signals(batch)
    if signals is not None and signals.logp is not None:
        return signals.logp
    if batch.rollout_logp is not None:
        # vLLM's own log-probs of the tokens it sampled (after temperature, as the trainer's): no forward either.
        # credo's reading: they differ from the trainer's by vLLM's float sums (<1e-4 per token, logged as
        # rollout/logp_diff_max), so only a near-tie in surprisal can pick another turn.
        return batch.rollout_logp
    return batched_response_logprobs(engine, batch.input_ids, batch.attention_mask, batch.prompt_len, temperature,
                                     micro=16)


def candidate_turns(turn_scores: torch.Tensor, config) -> torch.Tensor:
    """Tensor[N, T] bool: the turns that may get counterfactuals, TCPO's eligible turns (non-improving and before
    success): a turn after a solution has preservation/regression credit, and tcpo() would ignore its cf."""
    return eligible_turns(turn_scores, config.tcpo_tau, getattr(config, "tcpo_first_turn_prior", "zero"))


@torch.no_grad()
def counterfactuals(engine, sampler, tokenizer, batch, score_fn, config, timings) -> tuple:
    """Returns (cf Tensor[N, T], number of turns that got alternatives).

    engine: the actor (the surprisal forward where the sampler recorded no log-probs); sampler: the run's sampler
    (rl/rollout/samplers.py), which draws the alternatives as it draws the rollout's turns.

    score_fn(env, text, turn) -> float | None scores an alternative as turn `turn` of the env's episode without
    changing it (None when the env cannot, or the call failed: that turn gets no counterfactual).
    """
    t0 = time.perf_counter()
    n, num_turns = batch.turn_scores.shape
    cf = torch.full((n, num_turns), float("nan"))
    candidates = candidate_turns(batch.turn_scores, config)
    # Every rank of a ZeRO-3 engine must make the same forward/generate calls (each gathers parameters
    # collectively), so a rank without candidates still takes part when another rank has some.
    any_candidates = candidates.any() if not sampler.lockstep else \
        dist.all_reduce(torch.tensor([float(candidates.any())]), op="max").item() > 0
    if config.tcpo_cf_budget <= 0 or not any_candidates:
        timings["counterfactual"] = time.perf_counter() - t0
        return cf, 0
    pairs = candidates.nonzero().tolist()
    if config.tcpo_cf_select == "topl":
        surprisal = turn_surprisal(rollout_logprobs(engine, batch, config.temperature), batch.turn_ids, num_turns)
        pairs.sort(key=lambda ik: -surprisal[ik[0], ik[1]].item())
    else:
        random.Random(int(batch.group_ids[0]) * 7919 + n).shuffle(pairs)
    chosen = pairs[:config.tcpo_cf_budget]

    contexts = []
    for i, k in chosen:
        real = batch.input_ids[i][batch.attention_mask[i].bool()].tolist()
        prompt_tokens = int(batch.attention_mask[i, :batch.prompt_len].sum())
        start = int((batch.turn_ids[i] == k).nonzero()[0])  # first model token of turn k in the response part
        contexts += [real[:prompt_tokens + start]] * config.tcpo_cf_samples
    alternatives, _ = sampler.generate(contexts, timings)
    eos = set(sampler.eos_ids)
    for j, (i, k) in enumerate(chosen):
        texts = [tokenizer.decode([t for t in alt if t not in eos])
                 for alt in alternatives[j * config.tcpo_cf_samples:(j + 1) * config.tcpo_cf_samples]]
        scores = [score_fn(batch.envs[i], text, k) for text in texts]
        if any(s is None for s in scores):
            continue
        scores = torch.tensor(scores)
        if scores.max() > scores.min():  # all-equal alternatives carry no counterfactual information
            cf[i, k] = batch.turn_scores[i, k] - scores.mean()
    timings["counterfactual"] = time.perf_counter() - t0
    return cf, len(chosen)
