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

FILTER_METRICS = ("reward", "reward_sum", "correctness")


class FilterGroupsExhausted(TrainingAborted):
    """--filter_groups_max_rounds rounds did not find enough groups whose scores differ."""


@dataclass(frozen=True)
class FilterSettings:
    """The --filter_groups flags (names as on the command line)."""
    filter_groups: bool
    filter_groups_metric: str      # reward: what the method's advantage reads; reward_sum: the summed reward;
                                   # correctness: the env's verifier
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
    on one named metric). reward_sum: the scalar reward, the --reward_weights sum of the components, for every method:
    DARA's section D.1 filters on the summed reward, so a GDPO or DARA group whose components trade off to the same
    sum is dropped although its per-reward advantages are not zero. correctness: the env verifier's score, verl's
    `metric: acc` of the DAPO recipe. Abstentions (NaN) count as 0, as the scorer's weighted sum counts them."""
    if settings.filter_groups_metric == "correctness":
        columns = [batch.correctness]
    elif settings.filter_groups_metric == "reward" and settings.per_component and batch.components:
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


# --- the flags (DAPO 3.2; rl/config.py composes every room's) ---
DEFAULT_MAX_ROUNDS = 10  # the DAPO recipe's max_num_gen_batches in verl


def add_dynamic_sampling_flags(p):
    g = p.add_argument_group("rollout: DAPO's dynamic sampling")
    g.add_argument("--filter_groups", action="store_true",
                   help="dynamic sampling (DAPO 3.2, verl's algorithm.filter_groups): drop prompt groups whose "
                        "responses all score the same (--filter_groups_metric) and draw more prompts, a whole "
                        "rollout round at a time, until every rank holds --per_device_generation_batch_size groups")
    g.add_argument("--filter_groups_metric", choices=FILTER_METRICS, default="reward",
                   help="what a group must vary in: reward = what the method's advantage reads (the scalar reward; "
                        "for gdpo and dara any one component, credo's reading); reward_sum = the summed reward "
                        "(the --reward_weights sum of the components) whatever the method, as DARA filters (its "
                        "D.1); correctness = the env verifier's score (verl's acc, the DAPO recipe's choice)")
    g.add_argument("--filter_groups_max_rounds", type=int, default=DEFAULT_MAX_ROUNDS,
                   help="rollout rounds per step at most (verl's max_num_gen_batches; the DAPO recipe's 10); a step "
                        "that still lacks groups then stops the run with an error and a checkpoint of the state "
                        "before it, as verl does; 0 = no cap")


def validate_dynamic_sampling(args, method, bad):
    """The dynamic-sampling flags against each other and the method (its rl/methods/ class `method`)."""
    if args.filter_groups_max_rounds < 0:
        bad(f"--filter_groups_max_rounds must be >= 0 (0 = no cap), got {args.filter_groups_max_rounds}")
    if not args.filter_groups and (args.filter_groups_metric != "reward"
                                   or args.filter_groups_max_rounds != DEFAULT_MAX_ROUNDS):
        bad("--filter_groups_metric / --filter_groups_max_rounds are set but dynamic sampling is off: add "
            "--filter_groups")
    if args.filter_groups:
        if method.turn_level:
            bad(f"--filter_groups with --algo {args.algo}: its advantages are per turn, read from every turn's "
                "verifier score, so a group whose trajectory scores tie may still carry signal; dynamic sampling "
                "filters on one score per response and is refused here")
        if method.weighs_rewards_while_scoring():
            bad(f"--filter_groups with --algo {args.algo}: the method weighs each response's rewards while scoring "
                "and learns from the weights it drew (MAESTRO's Conductor); rounds whose groups are dropped would "
                "teach it from responses that never reach the update")
