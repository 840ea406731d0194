"""DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, section 3.2; verl's `algorithm.filter_groups`,
OpenRLHF's `--dynamic_filtering`): groups whose responses all score the same give every response a zero advantage
and only dilute the update, so they are dropped and more prompts are drawn until the batch is full again.

Each round is a whole rollout + score of --per_device_generation_batch_size prompts per rank. A rank keeps its own
groups (a group never leaves the rank that generated it) until it holds its quota, surplus groups beyond the quota
are discarded, as verl cuts its concatenated batch to train_batch_size. Rounds are collectives (ZeRO-3 generate,
the scorer's gathers), so every rank runs every round: one all_reduce per round tells all ranks whether any still
needs groups. At --filter_groups_max_rounds rounds with a rank still short, the step stops with an error, as verl
raises when num_gen_batches reaches max_num_gen_batches (0 = no cap, as there).
"""
from dataclasses import dataclass

import torch

from rl.engine import dist
from rl.errors import TrainingAborted
from rl.rollout.rows import join_rows

FILTER_METRICS = ("reward", "correctness")


class FilterGroupsExhausted(TrainingAborted):
    """--filter_groups_max_rounds rounds did not find enough groups whose scores differ."""


@dataclass(frozen=True)
class FilterSettings:
    """The --filter_groups flags (names as on the command line)."""
    filter_groups: bool
    filter_groups_metric: str      # reward: what the method's advantage reads; correctness: the env's verifier
    filter_groups_max_rounds: int  # 0 = no cap
    per_component: bool            # the method normalises each reward component on its own (GDPO, DARA)

    @classmethod
    def from_args(cls, args, per_component: bool) -> "FilterSettings":
        return cls(filter_groups=args.filter_groups, filter_groups_metric=args.filter_groups_metric,
                   filter_groups_max_rounds=args.filter_groups_max_rounds, per_component=per_component)


def spread_values(batch, settings: FilterSettings) -> torch.Tensor:
    """Tensor[N, K] of what a group must vary in to carry a learning signal.

    reward: the scalar reward (GRPO, RLOO, MAESTRO's mix read it), or, for a method that normalises each component in
    its own group, every component: a group is only silent there when all of them tie (credo's reading; verl filters
    on one named metric). correctness: the env verifier's score, verl's `metric: acc` of the DAPO recipe.
    Abstentions (NaN) count as 0, as the scorer's weighted sum counts them."""
    if settings.filter_groups_metric == "correctness":
        columns = [batch.correctness]
    elif settings.per_component and batch.components:
        columns = list(batch.components.values())
    else:
        columns = [batch.scores]
    return torch.nan_to_num(torch.stack([c.float().cpu() for c in columns], dim=1), nan=0.0)


def groups_with_spread(values: torch.Tensor, group_ids: torch.Tensor) -> tuple:
    """(group ids whose rows differ in some column, group ids whose rows all tie), each in first-seen order.

    Args:
        values: Tensor[N, K]; group_ids: Tensor[N] (same id = same prompt). A one-row group counts as having
            spread, as verl keeps it (it has nothing to be compared with)."""
    group_ids = group_ids.cpu()
    kept, dropped = [], []
    for g in dict.fromkeys(group_ids.tolist()):
        rows = values[group_ids == g]
        has_spread = len(rows) == 1 or bool((rows.amax(0) > rows.amin(0)).any())
        (kept if has_spread else dropped).append(g)
    return kept, dropped


def collect_groups(draw, settings: FilterSettings, quota: int, pad_token_id: int):
    """Draw rounds until every rank holds `quota` groups with spread.

    Args:
        draw: () -> a scored Rollout of this rank's next prompts (one round: rollout, score, reward shaping).
        quota: groups per rank (--per_device_generation_batch_size).
    Returns:
        (Rollout of exactly `quota` groups, metrics filter_groups/<name> summed over ranks)
    Raises:
        FilterGroupsExhausted when --filter_groups_max_rounds rounds did not fill every rank (all ranks together).
    """
    parts, held, rounds = [], 0, 0
    totals = torch.zeros(3, dtype=torch.float64)  # drawn, zero-spread, surplus groups on this rank
    while True:
        rounds += 1
        batch = draw()
        kept, dropped = groups_with_spread(spread_values(batch, settings), batch.group_ids)
        take = kept[:quota - held]
        held += len(take)
        rows = torch.isin(batch.group_ids.cpu(), torch.tensor(take, dtype=torch.long)).nonzero().squeeze(1)
        parts.append((batch, rows))
        totals += torch.tensor([len(kept) + len(dropped), len(dropped), len(kept) - len(take)], dtype=torch.float64)
        short = dist.all_reduce(torch.tensor([float(quota - held)], dtype=torch.float64)).item()
        if short == 0:
            break
        cap = settings.filter_groups_max_rounds
        if cap and rounds >= cap:
            drawn, zero = dist.all_reduce(totals.clone())[:2].tolist()
            raise FilterGroupsExhausted(
                f"--filter_groups: after {rounds} rounds (--filter_groups_max_rounds {cap}) the batch still lacks "
                f"{int(short)} of its {quota * dist.world_size()} groups: {int(zero)} of the {int(drawn)} groups drawn "
                f"scored the same in every response. The data may be too hard or too easy for the model (see "
                f"frac_zero_std_groups in the metrics of earlier steps); raise --filter_groups_max_rounds, 0 for no "
                f"cap, or train without --filter_groups. The checkpoint holds the state before this step.")
    batch = join_rows([(b, r) for b, r in parts if len(r)], pad_token_id)
    # what reaches the update, counted from the joined batch itself
    in_batch = torch.tensor([float(len(torch.unique(batch.group_ids.cpu()))), float(len(batch))], dtype=torch.float64)
    drawn, zero, surplus, kept, responses = dist.all_reduce(torch.cat([totals, in_batch])).tolist()
    metrics = {"filter_groups/rounds": float(rounds), "filter_groups/drawn_groups": drawn,
               "filter_groups/dropped_groups": zero, "filter_groups/surplus_groups": surplus,
               "filter_groups/kept_groups": kept, "filter_groups/responses": responses,
               "filter_groups/frac_dropped": zero / max(drawn, 1.0)}
    return batch, metrics
