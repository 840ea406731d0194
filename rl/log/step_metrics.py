"""What one training step reports, assembled for rl/log/metrics.py: the responses' lengths and truncation, the
advantages, the env's own numbers, the timings and throughput, the update against the machine's peak (MFU), and a few
completions as records (TRL's
`log_completions`, verl's logged generations). The reward metrics come from rl/scoring.py, the method's from
rl/methods/, the update's from rl/update/ppo.py; the trainer merges them in the order of the step.

Every metric here is batch-global (all ranks): each function that reduces is a collective every rank calls.
"""
import math
from dataclasses import dataclass

import torch

from rl.engine import dist
from rl.log.refinement_metrics import refinement_metrics

# The metrics that measure the clock (the phases' seconds, their shares, throughput, the update's FLOP/s and MFU):
# never the same twice, so every "the same run gives the same metrics" check leaves them out.
CLOCK_METRICS = ("time/", "time_share/", "throughput/", "perf/")


# --- the responses and their advantages ---------------------------------------------------------------------------
def response_metrics(batch, inputs, eos_ids) -> dict:
    """response_length/mean and /max (every model token of a trajectory), response_length/truncated_frac (on the
    console line: a response cut at --max_answer_seq_len learns nothing about how to end), and on multi-turn envs the
    preservation/regression rates and best- and final-turn success (rl/log/refinement_metrics.py).

    batch: this rank's Rollout; inputs: the batch-global GlobalBatch (Rollout.gather()); eos_ids: the sampler's."""
    m = {}
    if inputs.turn_scores.shape[1] > 1:
        m.update(refinement_metrics(inputs.turn_scores))
    m["response_length/mean"] = inputs.lengths.float().mean().item()
    m["response_length/max"] = inputs.lengths.max().item()
    truncated = batch.truncated(eos_ids)
    counts = dist.all_reduce(torch.tensor([float(truncated.sum()), float(len(truncated))], dtype=torch.float64))
    m["response_length/truncated_frac"] = (counts[0] / counts[1].clamp(min=1)).item()
    return m


def advantage_metrics(advantages: torch.Tensor) -> dict:
    """advantage/mean and advantage/std over every rank's rows (Tensor[n] or Tensor[n, T] on this rank)."""
    gathered = dist.all_gather_cat(advantages.detach().float().cpu())
    return {"advantage/mean": gathered.mean().item(),
            "advantage/std": gathered.std().item() if len(gathered) > 1 else 0.0}


# --- the env's own numbers ----------------------------------------------------------------------------------------
# `env/<component>/mean` and `env/info/<key>/mean`, each the mean over every turn (on every rank) that reported it: a
# key an env sets on some turns only is averaged over those turns, not diluted by the others (credo's reading; verl's
# `reward_extra_info` is averaged the same way over the responses that carry it).
def local_sums(env_values: list) -> dict:
    """{key: (sum, count)} over one rank's trajectories (N lists of per-turn dicts)."""
    sums = {}
    for turns in env_values or []:
        for values in turns:
            for key, value in values.items():
                total, count = sums.get(key, (0.0, 0))
                sums[key] = (total + value, count + 1)
    return sums


def env_metrics(env_values: list) -> dict:
    """Batch-global `env/<key>/mean` metrics of every StepResult component and numeric info entry; the key set is
    the union over ranks, so every rank reduces the same tensor."""
    local = local_sums(env_values)
    names = sorted({k for keys in dist.all_gather_object(sorted(local)) for k in keys})
    if not names:
        return {}
    stacked = torch.tensor([local.get(k, (0.0, 0)) for k in names], dtype=torch.float64)
    reduced = dist.all_reduce(stacked).tolist()
    return {f"env/{k}/mean": total / count for k, (total, count) in zip(names, reduced) if count}


# --- timings -----------------------------------------------------------------------------------------------------
def timing_metrics(timings: dict, generated_tokens: int) -> dict:
    """time/<phase> (the slowest rank's seconds), time_share/<phase> of time/step (e.g. time_share/counterfactual for
    TCPO, time_share/conductor for MAESTRO), and the throughput of the step's generated tokens.

    timings: {phase: seconds} of this rank, with "step" and "generate"; generated_tokens: over every rank."""
    keys = sorted(timings)
    slowest = dist.all_reduce(torch.tensor([timings[k] for k in keys], dtype=torch.float64), op="max")
    m = {f"time/{k}": slowest[i].item() for i, k in enumerate(keys)}
    step = max(m["time/step"], 1e-9)
    m.update({f"time_share/{k}": m[f"time/{k}"] / step for k in timings if k != "step"})
    m["throughput/generated_tokens_per_s"] = generated_tokens / max(m["time/generate"], 1e-9)
    m["throughput/tokens_per_s"] = generated_tokens / step
    return m


# --- the update against the machine's peak ----------------------------------------------------------------------
# Update FLOPs, credo's reading of the usual 6 N T rule (Kaplan et al. 2020), with the LM head counted apart because
# credo runs it on the response positions only (rl/update/batching.py):
#     6 x N_body x T_seq + 6 x d x V x T_head
# N_body: parameters outside the token embedding and the LM head (the embedding is a lookup, not a matmul); T_seq:
# tokens through the body (padded micro-batch rows x columns); d x V: the LM head's matmul; T_head: positions through
# the head; 6 = 2 (multiply-add) x (1 forward + 2 backward). Attention's score and value products are left out (under
# 2% at credo's CPU contexts of ~100 tokens; verl's FlopsCounter adds them). With LoRA the frozen weights get no
# weight gradient, so the true count is nearer 4 N T: the rule is kept, as verl keeps it.
def update_flops(body_params: float, head_params: float, seq_tokens: float, head_tokens: float) -> float:
    """The update's forward + backward FLOPs (the rule above); head_params: hidden size x vocabulary."""
    return 6.0 * body_params * seq_tokens + 6.0 * head_params * head_tokens


def flop_shape(model) -> tuple:
    """(N_body, d x V) of a causal LM, whole or ZeRO-3 partitioned (ds_numel), plain or LoRA-wrapped."""
    outside = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
    body = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if id(p) not in outside)
    config = model.config
    return body, config.hidden_size * config.vocab_size


@dataclass(frozen=True)
class UpdateRoofline:
    """What perf/mfu/actor needs besides the step: the model's FLOP shape and one rank's peak FLOP/s
    (rl.engine.hardware.peak_flops, built once by the trainer)."""
    body_params: float
    head_params: float
    peak_flops: float


def update_roofline_metrics(roofline: UpdateRoofline, tally) -> dict:
    """perf/actor_flops_per_s: the update's FLOPs over every rank (update_flops) over the slowest rank's seconds in
    the update's loop; perf/mfu/actor: that over the ranks' summed peak (verl's `perf/mfu/actor`). The no-grad
    log-prob passes before the update are not counted in either. tally: rl.update.ppo.UpdateTally."""
    tokens = dist.all_reduce(torch.tensor([tally.seq_tokens, tally.head_tokens], dtype=torch.float64)).tolist()
    seconds = max(dist.all_reduce(torch.tensor([tally.seconds], dtype=torch.float64), op="max").item(), 1e-9)
    achieved = update_flops(roofline.body_params, roofline.head_params, *tokens) / seconds
    return {"perf/actor_flops_per_s": achieved,
            "perf/mfu/actor": achieved / (roofline.peak_flops * dist.world_size())}


# --- a few completions ---------------------------------------------------------------------------------------------
def pick_rows(n: int, count: int) -> list:
    """`count` rows spread evenly over a batch of n (rows come in groups of one prompt: spreading them shows
    different prompts rather than one prompt's G samples)."""
    count = min(count, n)
    return [k * n // count for k in range(count)]


def _number(value):
    value = float(value)
    return value if math.isfinite(value) else None


def _numbers(value):
    """A tensor's .tolist(): a number, or nested lists of them, non-finite ones as None (strict JSON)."""
    return [_numbers(v) for v in value] if isinstance(value, list) else _number(value)


def completion_records(batch, count: int) -> list:
    """Records of `count` trajectories of a scored Rollout with its advantages, for OUTPUT_DIR/completions.jsonl:
    prompt, final completion, the reward and its components, the advantage (one per turn for turn-level methods),
    the method's own per-response data (`extras`: MAESTRO's emphasis action, an index into its reward list, and its
    pi; TCPO's counterfactual scores per turn), the prompt's `kind` where the env gives one, and for multi-turn
    episodes every turn's text and score, and the env's episode_record() where it has one. With count >= the batch,
    every row: enough to recompute a step's advantages offline (experiments/mechanisms/maestro_meta_reward.py does)."""
    if count <= 0 or len(batch) == 0:
        return []
    records = []
    for i in pick_rows(len(batch), count):
        turn_scores = [s for s in batch.turn_scores[i].tolist() if s == s] if batch.turn_scores is not None else []
        advantage = batch.advantages[i] if batch.advantages is not None else torch.tensor(float("nan"))
        if advantage.dim():  # turn-level methods: one advantage per turn played
            advantage = [_number(a) for a in advantage[:len(turn_scores)].tolist()]
        else:
            advantage = _number(advantage)
        record = {"group": int(batch.group_ids[i]), "prompt": batch.prompts[i] if batch.prompts else None,
                  "completion": batch.completions[i],
                  "reward": _number(batch.scores[i]) if batch.scores is not None else None,
                  "components": {k: _number(v[i]) for k, v in batch.components.items()},
                  "advantage": advantage, "turn_scores": turn_scores}
        kind = batch.samples[i].get("kind") if batch.samples else None
        if kind is not None:  # the prompt's kind (--env mixed: arith / describe), as eval.py's pass@1/<kind> uses
            record["kind"] = kind
        if batch.extras:
            record["extras"] = {k: _numbers(v[i].tolist()) for k, v in sorted(batch.extras.items())}
        if len(turn_scores) > 1 and batch.conversations:
            record["turns"] = [m["content"] for m in batch.conversations[i] if m["role"] == "assistant"]
        episode = batch.envs[i].episode_record() if batch.envs and hasattr(batch.envs[i], "episode_record") else {}
        if episode:  # the env's own account of the episode (--env toolcall: why a parse failed, the question's id)
            record["env"] = episode
        records.append(record)
    return records
