"""MAESTRO in the training step: the five open-domain rewards, the per-response reward weights before the advantages
(the Conductor's emphasis actions, or an ablation's), and the Conductor's buffered REINFORCE meta-update after them
(registered as the method's StepHooks).

Rewards (each on [0, 1] before mixing; rewards/policy_rewards.py defines them, with their signs and sources):
- fmt: the response has the required structure (--format_style);      - len: linear in the response's tokens
- ppl: NOVER's reasoning perplexity of the reference answer (lower better); - ent: mean token entropy (lower better)
- pref: a reward model's score (--reward_model_name_or_path; skipped with a warning without one)
ppl, ent and pref are rank-normalised within each group (their raw scales are arbitrary). `correctness` (the env
verifier) may be added to the mix with --maestro_rewards.

--maestro_weights: conductor (sampled actions a ~ pi(. | h), w(a) below), equal (1/K), random (the paper's Rand: a
random weight vector per response, Dirichlet(1)), random_action (a uniform random action per response, w(a)).
The emphasis weights w(a) = (1 - eta) / K + eta * onehot(a) are credo's reading (rl/advantages/maestro.py).
With --maestro_kl_in_reward beta_r, each response's reward is w . r - beta_r * KL(policy || reference) on it (the
paper's figure 2 puts the KL into the reward, beta 0.1), so the Conductor's meta-reward, the advantage, sees it.
"""
import logging
import time

import torch

from rewards.policy_rewards import PolicyRewards, normalise
from rl import dist
from rl.advantages.maestro import emphasis_weights, mixed_reward
from rl.advantages.registry import StepHooks, register_step_hooks
from rl.batching import batched_response_logprobs
from rl.conductor import ConductorLearner
from rl.loss import kl_penalty

logger = logging.getLogger(__name__)


def hidden_size(model) -> int:
    config = model.config
    return getattr(config, "hidden_size", None) or config.get_text_config().hidden_size


def mean_weights_by_kind(weights: torch.Tensor, kinds: list, names: list, prefix: str) -> dict:
    """{prefix/<kind>/<reward>: mean weight over that kind's responses}; rows without a kind are left out.
    weights: Tensor[N, K]; kinds: N prompt kinds (a row's `kind` field, e.g. --env mixed's arith / describe)."""
    out = {}
    for kind in sorted({k for k in kinds if k is not None}, key=str):
        rows = torch.tensor([k == kind for k in kinds])
        out.update({f"{prefix}/{kind}/{name}": weights[rows, j].mean().item() for j, name in enumerate(names)})
    return out


@register_step_hooks("maestro")
class Maestro(StepHooks):
    def __init__(self, trainer):
        super().__init__(trainer)
        a = trainer.args
        self.names = list(a.maestro_rewards)
        if "pref" in self.names and not a.reward_model_name_or_path:
            if trainer.rank == 0:
                logger.warning("MAESTRO: no --reward_model_name_or_path given; the `pref` reward is skipped")
            self.names.remove("pref")
        self.policy_rewards = PolicyRewards([n for n in self.names if n != "correctness"], a, trainer.actor,
                                            trainer.tokenizer)
        model = getattr(trainer.actor, "module", trainer.actor)
        self.learner = ConductorLearner(hidden_size(model), len(self.names), lr=a.maestro_lr,
                                        entropy_coef=a.maestro_entropy_coef, update_interval=a.maestro_update_interval,
                                        tau_init=a.maestro_tau_init, hidden_norm=a.maestro_hidden_norm, seed=a.seed,
                                        device=trainer.actor.device)
        self.pending = None

    # --- rewards ----------------------------------------------------------------------------------------------
    def raw_rewards(self, batch):
        """({name: Tensor[n]} on each reward's own scale, hidden Tensor[n, H]) for this rank's responses."""
        raw, hidden = self.policy_rewards.raw(batch)
        if "correctness" in self.names:
            raw["correctness"] = batch.correctness.float().cpu()
        return {name: raw[name] for name in self.names}, hidden

    def response_kl(self, batch) -> torch.Tensor:
        """Per-response mean KL(policy || reference) over its tokens (--kl_type estimator). Tensor[n] on CPU.

        The reference log-probs are kept on the batch, so the loss does not compute them a second time."""
        t, a = self.trainer, self.trainer.args
        micro = a.per_device_train_micro_batch_size
        t.actor.eval()
        logp = batched_response_logprobs(t.actor, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                         a.temperature, micro)
        t.actor.train()
        batch.ref_logp = batched_response_logprobs(t.reference, batch.input_ids, batch.attention_mask,
                                                   batch.prompt_len, a.temperature, micro)
        mask = batch.response_mask.to(logp.device)
        kl = kl_penalty(logp, batch.ref_logp, a.kl_type) * mask
        return (kl.sum(1) / mask.sum(1).clamp(min=1)).float().cpu()

    def weights(self, n: int, hidden: torch.Tensor):
        """(weights Tensor[N, K], actions Tensor[N] or None, probs Tensor[N, K] or None) for the N global rows."""
        a, k = self.trainer.args, len(self.names)
        if a.maestro_weights == "conductor":
            h = dist.all_gather_cat(hidden)
            actions, probs = self.learner.act(h.to(self.learner.conductor.log_tau.device))
            self.pending = (h, actions)
            return emphasis_weights(actions, k, a.maestro_emphasis), actions, probs.cpu()
        if a.maestro_weights == "random_action":
            actions = self.learner.random_actions(n)
            return emphasis_weights(actions, k, a.maestro_emphasis), actions, None
        if a.maestro_weights == "random":
            return self.learner.random_weight_vectors(n), None, None
        return torch.full((n, k), 1.0 / k), None, None

    # --- hooks ------------------------------------------------------------------------------------------------
    def after_score(self, batch, timings):
        a, rank = self.trainer.args, self.trainer.rank
        t0 = time.perf_counter()
        raw, hidden = self.raw_rewards(batch)
        kl = self.response_kl(batch) if a.maestro_kl_in_reward > 0 else None
        t1 = time.perf_counter()
        group_ids = dist.all_gather_cat(batch.group_ids)
        raw = {k: dist.all_gather_cat(v) for k, v in raw.items()}
        rewards = normalise(raw, group_ids)
        matrix = torch.stack([rewards[k] for k in self.names], dim=1)                       # [N, K] global
        weights, actions, probs = self.weights(len(group_ids), hidden)
        n = len(batch)
        mine = slice(rank * n, (rank + 1) * n)
        batch.components = {name: rewards[name][mine] for name in self.names}
        batch.actions = actions[mine] if actions is not None else None
        batch.scores = mixed_reward(matrix[mine], weights[mine])
        if kl is not None:
            batch.scores = batch.scores - a.maestro_kl_in_reward * kl
        timings["maestro_rewards"] = t1 - t0
        timings["conductor"] = time.perf_counter() - t1
        metrics = {f"conductor/weight/{name}": weights[:, j].mean().item() for j, name in enumerate(self.names)}
        metrics.update({f"maestro/raw/{name}": v[~torch.isnan(v)].mean().item() if (~torch.isnan(v)).any()
                        else float("nan") for name, v in raw.items()})
        metrics["conductor/tau"] = self.learner.conductor.tau
        kinds = [kind for kinds in dist.all_gather_object([s.get("kind") for s in batch.samples]) for kind in kinds]
        metrics.update(mean_weights_by_kind(weights, kinds, self.names, "conductor/weight"))
        if probs is not None:
            metrics["conductor/entropy"] = -(probs * probs.log()).sum(-1).mean().item()
            metrics.update(mean_weights_by_kind(probs, kinds, self.names, "conductor/pi"))
        if kl is not None:
            metrics["maestro/kl_in_reward"] = dist.all_gather_cat(kl).mean().item()
        return metrics

    def after_advantages(self, inputs, advantages, timings):
        if self.pending is None:
            return {}
        t0 = time.perf_counter()
        h, actions = self.pending
        self.pending = None
        metrics = self.learner.record(h, actions, advantages)
        timings["conductor"] = timings.get("conductor", 0.0) + time.perf_counter() - t0
        return metrics

    def state_dict(self) -> dict:
        return {"learner": self.learner.state_dict()}

    def load_state_dict(self, state: dict):
        if "learner" in state:
            self.learner.load_state_dict(state["learner"])
