"""DARA: density-aware reward weights on top of GDPO, w_k = min(w_max, sqrt(rho_ref / rho_k)).
The maths and the diagnostics' energy view: rl/advantages/dara.py."""
from dataclasses import dataclass

from rl.advantages.dara import dara
from rl.methods.base import Method, resolve_weights, weights_tensor


@dataclass
class DARAConfig:
    dara_variant: str
    dara_w_max: float
    dara_tau: float
    dara_static_weights: list  # parsed (None = the density weights)
    final_norm: str


class DARA(Method):
    name = "dara"
    summary = "density-aware reward weights over GDPO"
    Config = DARAConfig
    min_rewards = 2

    @classmethod
    def add_flags(cls, parser):
        g = parser.add_argument_group("DARA (density-aware reward weights)")
        g.add_argument("--dara_variant", choices=("asym", "sym"), default="asym", help="DARA variant (paper's main: asym)")
        g.add_argument("--dara_w_max", type=float, default=5.0, help="DARA weight cap (5: the authors' code; the paper's text gives no value); 1 gives "
                            "GDPO")
        g.add_argument("--dara_tau", type=float, default=1e-8, help="DARA activity threshold on sum |Z| in a group")
        g.add_argument("--dara_static_weights", default=None,
                       help="comma list replacing DARA's density weights (the static-weight control)")

    @classmethod
    def check_flags(cls, args, bad):
        resolve_weights(args, "dara_static_weights", bad)
        if args.dara_w_max < 1:
            bad(f"--dara_w_max must be >= 1, got {args.dara_w_max}")

    def advantages(self, batch):
        c = self.config
        adv, info = dara(batch.component_matrix(), batch.group_ids, variant=c.dara_variant, w_max=c.dara_w_max,
                         tau=c.dara_tau, static_weights=weights_tensor(c.dara_static_weights, batch, "dara_static_weights"),
                         final_norm=c.final_norm, lengths=batch.lengths)
        return adv, dara_metrics(info, list(batch.components))


def dara_metrics(info: dict, names: list) -> dict:
    """The step's dara/<quantity>/<reward> metrics from dara()'s info: density and weight, and the diagnostics of the
    energy view (rl/advantages/dara.py): groups where the reward is active (of dara/num_groups), its advantage energy
    sum_i Z^2 before and after the weights, and cap_binds 1 when w_max clipped its weight."""
    metrics = {"dara/num_groups": float(info["num_groups"])}
    for k, name in enumerate(names):
        metrics[f"dara/rho/{name}"] = info["rho"][k].item()
        metrics[f"dara/w/{name}"] = info["w"][k].item()
        metrics[f"dara/active_groups/{name}"] = float(info["active_groups"][k].item())
        metrics[f"dara/energy/{name}"] = info["energy"][k].item()
        metrics[f"dara/weighted_energy/{name}"] = info["weighted_energy"][k].item()
        metrics[f"dara/cap_binds/{name}"] = float(info["cap_binds"][k].item())
    return metrics
