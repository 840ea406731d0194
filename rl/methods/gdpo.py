"""GDPO: each reward z-scored in its own group, then the weighted sum normalised over the batch.
The maths: rl/advantages/gdpo.py."""
from dataclasses import dataclass

from rl.advantages.gdpo import gdpo
from rl.methods.base import Method, weights_tensor


@dataclass
class GDPOConfig:
    reward_weights: list  # parsed --reward_weights (None = 1 each)
    final_norm: str       # response | token | none


class GDPO(Method):
    name = "gdpo"
    summary = "group-decoupled normalisation of several rewards"
    Config = GDPOConfig
    min_rewards = 2

    def advantages(self, batch):
        c = self.config
        adv = gdpo(batch.component_matrix(), batch.group_ids, weights_tensor(c.reward_weights, batch, "reward_weights"),
                   final_norm=c.final_norm, lengths=batch.lengths)
        return adv, {}
