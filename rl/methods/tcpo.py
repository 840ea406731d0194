"""TCPO: turn-level credit from verifier score histories (retrospective improvement, preservation and regression
terms, hindsight / fixed-history counterfactuals, an early-turn prior). The maths: rl/advantages/tcpo.py; the
counterfactual sampling of the most surprising non-improving turns: rl/methods/tcpo_counterfactuals.py."""
from dataclasses import dataclass

import torch

from rl.advantages.tcpo import FIRST_TURN_PRIORS, tcpo
from rl.methods.base import Method


@dataclass
class TCPOConfig:
    tcpo_tau: float
    tcpo_beta_pres: float
    tcpo_beta_reg: float
    tcpo_lambda_hind: float
    tcpo_gamma: float
    tcpo_cf_budget: int
    tcpo_cf_mix: float
    tcpo_first_turn_prior: str
    tcpo_no_retro: bool
    tcpo_no_hind: bool
    tcpo_cf_samples: int      # the counterfactuals' own flags (rl/methods/tcpo_counterfactuals.py)
    tcpo_cf_select: str
    temperature: float        # the rollout's, which the counterfactual alternatives are sampled at


class TCPO(Method):
    name = "tcpo"
    summary = "turn-level credit from verifier score histories"
    Config = TCPOConfig
    turn_level = True
    fixed_turns = True

    @classmethod
    def add_flags(cls, parser):
        g = parser.add_argument_group("TCPO (turn-level credit from verifier score histories)")
        g.add_argument("--tcpo_tau", type=float, default=1.0, help="TCPO: a prior best >= tau counts as solved")
        g.add_argument("--tcpo_beta_pres", type=float, default=0.1, help="TCPO preservation bonus")
        g.add_argument("--tcpo_beta_reg", type=float, default=1.0, help="TCPO regression penalty scale")
        g.add_argument("--tcpo_lambda_hind", type=float, default=1.0, help="TCPO hindsight scale")
        g.add_argument("--tcpo_gamma", type=float, default=0.9, help="TCPO early-turn prior: turn k weighted gamma^(k-1)")
        g.add_argument("--tcpo_cf_budget", type=int, default=5,
                       help="TCPO: non-improving turns per rank and step that get fixed-history counterfactuals "
                            "(0 = off)")
        g.add_argument("--tcpo_cf_select", choices=("topl", "random"), default="topl",
                       help="TCPO: pick counterfactual turns by highest surprisal (topl) or at random (ablation)")
        g.add_argument("--tcpo_cf_samples", type=int, default=4, help="TCPO: alternatives sampled per counterfactual turn")
        g.add_argument("--tcpo_cf_mix", type=float, default=0.5,
                       help="TCPO: weight of the counterfactual in the delayed term")
        g.add_argument("--tcpo_first_turn_prior", choices=FIRST_TURN_PRIORS, default="zero",
                       help="TCPO (credo's reading; the paper has no code): the prior best before turn 1; zero = 0 (a "
                            "partial first turn is an improvement), none = no retrospective credit at turn 1")
        g.add_argument("--tcpo_no_retro", action="store_true", help="TCPO ablation: drop the retrospective term")
        g.add_argument("--tcpo_no_hind", action="store_true", help="TCPO ablation: drop the hindsight/counterfactual term")

    @classmethod
    def check_flags(cls, args, bad):
        if args.tcpo_cf_samples < 2 and args.tcpo_cf_budget > 0:
            bad("--tcpo_cf_samples must be >= 2 (a counterfactual needs alternatives that can differ)")

    def sampling_signals(self):
        """The turn surprisal of --tcpo_cf_select topl comes from the sampled tokens' log-probs."""
        wanted = self.config.tcpo_cf_budget > 0 and self.config.tcpo_cf_select == "topl"
        return frozenset({"logp"}) if wanted else frozenset()

    def after_score(self, batch, timings):
        """Fixed-history counterfactuals for the most surprising non-improving turns, as batch.extras
        ["counterfactual"] Tensor[n, T] (NaN = none)."""
        from rl.methods.tcpo_counterfactuals import counterfactuals  # imported here: it pulls in the generation code
        ctx = self.ctx
        cf, count = counterfactuals(ctx.actor, ctx.sampler, ctx.tokenizer, batch, ctx.score_alternative, self.config,
                                    timings)
        batch.extras["counterfactual"] = cf
        return {"tcpo/cf_turns": float(count), "tcpo/cf_applied": float(torch.isfinite(cf).sum())}

    def advantages(self, batch):
        c = self.config
        adv, parts = tcpo(batch.turn_scores, batch.group_ids, tau=c.tcpo_tau, beta_pres=c.tcpo_beta_pres,
                          beta_reg=c.tcpo_beta_reg, lambda_hind=c.tcpo_lambda_hind, gamma=c.tcpo_gamma,
                          counterfactual=batch.extras.get("counterfactual"), cf_mix=c.tcpo_cf_mix,
                          use_retro=not c.tcpo_no_retro, use_hind=not c.tcpo_no_hind,
                          first_turn_prior=c.tcpo_first_turn_prior, return_parts=True)
        present = ~torch.isnan(batch.turn_scores)
        metrics = {f"tcpo/{name}": value[present].mean().item() for name, value in parts.items()}
        for name in ("pres", "reg"):  # how often the credit for keeping / breaking a solution fired
            metrics[f"tcpo/{name}_frac"] = (parts[name][present] != 0).double().mean().item()
        return adv, metrics
