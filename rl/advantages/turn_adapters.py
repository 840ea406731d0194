"""Trainer adapters of the turn-level estimators (TCPO, MT-GRPO): flags and batch tensors -> pure functions."""
import torch

from rl.advantages.mt_grpo import mt_grpo
from rl.advantages.registry import AdvantageInputs, StepHooks, register_adapter, register_step_hooks
from rl.advantages.tcpo import tcpo


@register_adapter("mt_grpo")
def mt_grpo_from_batch(batch: AdvantageInputs, args):
    return mt_grpo(batch.turn_scores, batch.group_ids, outcome=batch.scores, lam=args.mt_grpo_lambda), {}


@register_adapter("tcpo")
def tcpo_from_batch(batch: AdvantageInputs, args):
    adv, parts = tcpo(batch.turn_scores, batch.group_ids, tau=args.tcpo_tau, beta_pres=args.tcpo_beta_pres,
                      beta_reg=args.tcpo_beta_reg, lambda_hind=args.tcpo_lambda_hind, gamma=args.tcpo_gamma,
                      counterfactual=batch.counterfactual, cf_mix=args.tcpo_cf_mix, use_retro=not args.tcpo_no_retro,
                      use_hind=not args.tcpo_no_hind, first_turn_prior=args.tcpo_first_turn_prior,
                      return_parts=True)
    present = ~torch.isnan(batch.turn_scores)
    metrics = {f"tcpo/{name}": value[present].mean().item() for name, value in parts.items()}
    for name in ("pres", "reg"):  # how often the credit for keeping / breaking a solution fired
        metrics[f"tcpo/{name}_frac"] = (parts[name][present] != 0).double().mean().item()
    return adv, metrics


@register_step_hooks("tcpo")
class TCPOCounterfactuals(StepHooks):
    """Fixed-history counterfactuals for the most surprising non-improving turns (rl/counterfactual.py)."""

    def after_score(self, batch, timings):
        from rl.counterfactual import counterfactuals
        t = self.trainer
        cf, count = counterfactuals(t.actor, t.sampler, t.tokenizer, batch, t.scorer.score_alternative, t.args,
                                     timings)
        batch.counterfactual = cf
        return {"tcpo/cf_turns": float(count), "tcpo/cf_applied": float(torch.isfinite(cf).sum())}
