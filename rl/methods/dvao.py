"""DVAO: each reward's group z-score weighted by its share of the group's spread (no batch normalisation after).
The maths, the authors' code it matches and the readings where that code is silent: rl/advantages/dvao.py."""
from dataclasses import dataclass

from rl.advantages.dvao import dvao
from rl.methods.base import Method, weights_tensor


@dataclass
class DVAOConfig:
    reward_weights: list  # parsed --reward_weights: DVAO's base weights (None = 1/K each; the authors' 0.5, 0.5)


class DVAO(Method):
    name = "dvao"
    summary = "rewards weighted by their in-group spread (DVAO)"
    Config = DVAOConfig
    min_rewards = 2

    @classmethod
    def validate(cls, args, bad):
        weights = args.reward_weights
        if weights is not None and (min(weights) < 0 or sum(weights) <= 0):
            bad(f"--algo dvao reads --reward_weights as its base weights: they must be >= 0 with a positive sum, "
                f"got {','.join(map(str, weights))}")

    def advantages(self, batch):
        adv, info = dvao(batch.component_matrix(), batch.group_ids,
                         base_weights=weights_tensor(self.config.reward_weights, batch, "reward_weights"))
        return adv, dvao_metrics(info, list(batch.components))


def dvao_metrics(info: dict, names: list) -> dict:
    """The step's dvao/* metrics: dvao/w/<reward>, the mean over live groups of the weight lambda on the reward's
    z-score (its share of the group's weighted spread; the shares sum to 1, so the reward above its base share
    1/K is the one DVAO up-weighted this step), dvao/active_groups/<reward> (groups where it varies), and
    dvao/live_groups of dvao/num_groups (groups where any reward varies; the others get advantage 0).
    credo's diagnostics: the authors' code logs none for DVAO."""
    metrics = {"dvao/num_groups": float(info["num_groups"]), "dvao/live_groups": float(info["live_groups"])}
    for k, name in enumerate(names):
        metrics[f"dvao/w/{name}"] = info["w"][k].item()
        metrics[f"dvao/active_groups/{name}"] = float(info["active_groups"][k].item())
    return metrics
