"""MT-GRPO (Zeng et al. 2025, "Reinforcing Multi-Turn Reasoning in LLM Agents via Turn-Level Credit Assignment"),
as their code assigns it: SiliangZeng/Multi-Turn-RL-Agent, verifiers/trainers/mt_grpo_env_trainer.py,
`_assign_advantages` (with `_compute_normalized_advantages` of verifiers/trainers/grpo_env_trainer.py).

In that file every advantage is a GRPO group z-score, (x - group mean) / (group sample std + 1e-4), of one scalar per
completion: the turn reward, the outcome reward, and their sum ("combined"). A completion's tokens up to the first
env result (its first turn) get outcome_adv + turn_advantage_coef * turn_adv; the tokens after it (the final turn)
get outcome_adv alone; a completion that never reached an env result (a single turn) gets combined_adv throughout.

Zeng's tasks have two turns. credo's reading for T turns: every turn but a trajectory's last gets
z(outcome) + lam * z_(prompt, turn k)(r[:, k]), its last turn z(outcome), and a one-turn trajectory (solved at turn
1 under --episode_end success) z(r[:, 1] + outcome), the combined advantage with its turn score as the turn reward.
"""
import torch

from rl.advantages.stats import group_zscore, last_index, last_present

ZENG_EPS = 1e-4  # the std offset of `_compute_normalized_advantages`


def mt_grpo(scores: torch.Tensor, group_ids: torch.Tensor, outcome: torch.Tensor = None, lam: float = 1.0,
            eps: float = ZENG_EPS) -> torch.Tensor:
    """Turn advantages, Zeng et al.'s assignment (module docstring).

    Args:
        scores: Tensor[N, T] turn scores r[i, k], NaN where trajectory i has no turn k.
        group_ids: Tensor[N] long.
        outcome: Tensor[N] trajectory reward (default: the score of its last turn).
        lam: weight of the turn-level term (--mt_grpo_lambda; Zeng's turn_advantage_coef, default 1).

    Returns:
        Tensor[N, T] float32: A[i, k] = z(outcome)[i] + lam * z_(group, k)(r[:, k])[i] on every turn before
        trajectory i's last, z(outcome)[i] on its last, z(r[:, 0] + outcome)[i] when it has one turn; 0 where
        scores is NaN.
    """
    r = scores.to(torch.float64)
    present = ~torch.isnan(r)
    outcome = last_present(r) if outcome is None else outcome.to(torch.float64)
    outcome_adv = group_zscore(outcome, group_ids, eps)
    adv = outcome_adv.unsqueeze(1).expand_as(r).clone()
    last = last_index(r)
    for k in range(r.shape[1]):
        before_last = present[:, k] & (last > k)  # tokens before an env result: Zeng's `before_result_mask`
        if before_last.any():
            turn_adv = group_zscore(torch.where(present[:, k], r[:, k], torch.nan), group_ids, eps)
            adv[before_last, k] += lam * turn_adv[before_last]
    one_turn = present[:, 0] & (last == 0)
    if one_turn.any():  # no env result in the completion: Zeng's combined advantage
        combined = group_zscore(torch.nan_to_num(r[:, 0], nan=0.0) + outcome, group_ids, eps)
        adv[one_turn, 0] = combined[one_turn]
    return torch.where(present, adv, torch.zeros_like(adv)).to(torch.float32)
