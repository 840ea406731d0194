"""RLOO (Ahmadian et al. 2024): REINFORCE with a leave-one-out baseline per prompt group, on the scalar reward
(the --reward_weights sum when there are several). The maths: rl/advantages/rloo.py."""
from rl.advantages.rloo import rloo
from rl.methods.base import Method


class RLOO(Method):
    name = "rloo"
    summary = "REINFORCE leave-one-out baseline (the mean of the other responses to the prompt)"

    def advantages(self, batch):
        return rloo(batch.scores, batch.group_ids), {}
