"""MT-GRPO (Zeng et al. 2025): turn-level advantages, the outcome's group z-score plus lambda times each turn
reward's. The maths and its reading of Zeng's code: rl/advantages/mt_grpo.py."""
from dataclasses import dataclass

from rl.advantages.mt_grpo import mt_grpo
from rl.methods.base import Method


@dataclass
class MTGRPOConfig:
    mt_grpo_lambda: float


class MTGRPO(Method):
    name = "mt_grpo"
    summary = "turn-level GRPO (outcome + per-turn rewards)"
    Config = MTGRPOConfig
    turn_level = True
    fixed_turns = True

    @classmethod
    def add_flags(cls, parser):
        g = parser.add_argument_group("MT-GRPO (turn-level GRPO)")
        g.add_argument("--mt_grpo_lambda", type=float, default=1.0, help="MT-GRPO weight of the turn-level advantage")

    def advantages(self, batch):
        return mt_grpo(batch.turn_scores, batch.group_ids, outcome=batch.scores, lam=self.config.mt_grpo_lambda), {}
