"""GRPO (Shao et al. 2024): the group-relative advantage of each response's scalar reward; --scale_rewards none is
Dr.GRPO (Liu et al. 2025). The maths: rl/advantages/grpo.py."""
from dataclasses import dataclass

from rl.advantages.grpo import grpo
from rl.methods.base import Method


@dataclass
class GRPOConfig:
    scale_rewards: str  # group | batch | none (the loss group of flags: MAESTRO and RLOO read it too)


class GRPO(Method):
    name = "grpo"
    summary = "group-relative advantage of the summed reward"
    Config = GRPOConfig

    def advantages(self, batch):
        return grpo(batch.scores, batch.group_ids, scale=self.config.scale_rewards), {}
