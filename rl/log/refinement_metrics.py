"""What refinement does to a solution, from per-turn scores: kept (preservation) or broken (regression).

Under --episode_end success an episode stops at its first solution, so no turn ever follows a solved one and both
rates are undefined (NaN, logged as null); under --episode_end max_turns they measure what TCPO's preservation and
regression credit act on. One definition serves train.py's step metrics and eval.py's results.
"""
import math

import torch

from envs.base import SUCCESS_THRESHOLD


def transition_rates(solved_by_turn: list) -> dict:
    """Rates over every pair (turn k solved, turn k + 1 taken) of every sample.

    solved_by_turn: one list of 0/1 (or bool) per sample, one entry per turn it took.
    Returns {"preservation_rate": share of those pairs still solved at k + 1, "regression_rate": share unsolved at
    k + 1, "solved_then_pairs": how many pairs there were}; the rates are NaN without any pair.
    """
    kept = broken = 0
    for turns in solved_by_turn:
        for now, nxt in zip(turns, turns[1:]):
            if now:
                kept += bool(nxt)
                broken += not nxt
    pairs = kept + broken
    return {"preservation_rate": kept / pairs if pairs else math.nan,
            "regression_rate": broken / pairs if pairs else math.nan,
            "solved_then_pairs": float(pairs)}


def refinement_metrics(turn_scores: torch.Tensor) -> dict:
    """Step metrics of a batch. turn_scores: Tensor[N, T], NaN where a trajectory took no turn k.

    preservation_rate / regression_rate (above), best_turn_success (share solved at some turn), final_turn_success
    (share solved at their last turn) and turn_score_drop_rate (share of consecutive turn pairs whose score fell:
    the graded counterpart of regression, e.g. 2/3 -> 1/3 on arith_multi).
    """
    present = ~torch.isnan(turn_scores)
    solved = torch.nan_to_num(turn_scores, nan=0.0) >= SUCCESS_THRESHOLD
    rows = [[bool(s) for s, p in zip(srow, prow) if p] for srow, prow in zip(solved.tolist(), present.tolist())]
    m = transition_rates(rows)
    m["best_turn_success"] = sum(any(r) for r in rows) / max(len(rows), 1)
    m["final_turn_success"] = sum(bool(r) and r[-1] for r in rows) / max(len(rows), 1)
    both = present[:, 1:] & present[:, :-1]
    drops = (turn_scores[:, 1:] < turn_scores[:, :-1]) & both
    m["turn_score_drop_rate"] = (drops.sum() / both.sum()).item() if both.any() else math.nan
    return m
