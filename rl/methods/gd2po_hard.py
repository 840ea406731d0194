"""GD²PO-Hard: GDPO without the responses whose rewards pull in opposite directions, each query weighted by the share
of its responses kept. The maths and the two authors' codes it matches: rl/advantages/gd2po_hard.py."""
from dataclasses import dataclass

from rl.advantages.gd2po_hard import WEIGHT_AT, gd2po_hard
from rl.methods.base import Method, weights_tensor


@dataclass
class GD2POHardConfig:
    reward_weights: list  # parsed --reward_weights (None = 1 each, both authors' codes)
    final_norm: str       # response | token | none, over the kept responses
    gd2po_weight_at: str  # advantage | loss


class GD2POHard(Method):
    name = "gd2po_hard"
    summary = "GDPO dropping responses whose rewards conflict in sign, queries weighted by their kept share"
    Config = GD2POHardConfig
    min_rewards = 2

    @classmethod
    def add_flags(cls, parser):
        g = parser.add_argument_group("GD²PO-Hard (conflict filtering and query weights)")
        g.add_argument("--gd2po_weight_at", choices=WEIGHT_AT, default="advantage",
                       help="where the query weight q (the kept share of a query's responses) is applied: advantage "
                            "= q x the summed z-scores before the kept-only normalisation (the GD²PO authors' code, "
                            "Qwen-Applications/GD2PO); loss = q x the normalised advantage, i.e. on the clipped "
                            "surrogate (the DARA authors' port, zhaihaotian/DARA, behind DARA's TABLE1)")

    @classmethod
    def check_flags(cls, args, bad):
        if args.algo != cls.name and args.gd2po_weight_at != "advantage":
            bad(f"--gd2po_weight_at is read by --algo gd2po_hard only (got --algo {args.algo})")

    def advantages(self, batch):
        c = self.config
        adv, info = gd2po_hard(batch.component_matrix(), batch.group_ids,
                               weights=weights_tensor(c.reward_weights, batch, "reward_weights"),
                               weight_at=c.gd2po_weight_at, final_norm=c.final_norm, lengths=batch.lengths)
        return adv, gd2po_metrics(info)


def gd2po_metrics(info: dict) -> dict:
    """The step's gd2po/* metrics: dropped_frac (responses whose weighted z-scores conflict in sign, of all),
    query_weight_mean (mean q over responses), groups_with_drops and empty_groups (q < 1, q = 0) of num_groups."""
    return {"gd2po/dropped_frac": info["dropped_frac"], "gd2po/query_weight_mean": info["query_weight"].mean().item(),
            "gd2po/num_groups": float(info["num_groups"]), "gd2po/groups_with_drops": float(info["groups_with_drops"]),
            "gd2po/empty_groups": float(info["empty_groups"])}
