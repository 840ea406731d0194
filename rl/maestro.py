"""MAESTRO in the training step: the five open-domain rewards, the Conductor's per-response emphasis actions
before the advantages, and its buffered REINFORCE meta-update after them (registered as the method's StepHooks).

Rewards (each on [0, 1] before mixing):
- fmt: the response has the required structure (--format_style);      - len: linear in the response's tokens
- ppl: NOVER-style, -NLL of the reference answer after the reasoning;  - ent: mean token entropy under the policy
- pref: a reward model's score (--reward_model_name_or_path; skipped with a warning without one)
ppl, ent and pref are rank-normalised within each group (their raw scales are arbitrary). `correctness` (the env
verifier) may be added to the mix with --maestro_rewards.
"""
import logging
import time

import torch

from rewards.format import FormatReward
from rewards.length import linear_length_score
from rewards.policy_signals import entropy_and_last_hidden, nover_tokens, reference_nll
from rl import dist
from rl.advantages.maestro import emphasis_weights, mixed_reward
from rl.advantages.registry import StepHooks, register_step_hooks
from rl.advantages.stats import group_rank_normalize
from rl.conductor import ConductorLearner

logger = logging.getLogger(__name__)
MAESTRO_REWARDS = ("fmt", "ppl", "ent", "len", "pref", "correctness")
RANK_NORMALISED = {"ppl": -1.0, "ent": 1.0, "pref": 1.0}  # name -> sign: lower NLL is better


def hidden_size(model) -> int:
    config = model.config
    return getattr(config, "hidden_size", None) or config.get_text_config().hidden_size


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
        self.preference = None
        if "pref" in self.names:
            from rewards.preference import PreferenceReward
            self.preference = PreferenceReward(a.reward_model_name_or_path, device=trainer.actor.device)
        self.format = FormatReward(a.format_style)
        model = getattr(trainer.actor, "module", trainer.actor)
        self.learner = ConductorLearner(hidden_size(model), len(self.names), lr=a.maestro_lr,
                                        entropy_coef=a.maestro_entropy_coef, update_interval=a.maestro_update_interval,
                                        tau_init=a.maestro_tau_init, seed=a.seed, device=trainer.actor.device)
        self.pending = None

    # --- rewards ----------------------------------------------------------------------------------------------
    def raw_rewards(self, batch):
        """({name: Tensor[n]} on each reward's own scale, hidden Tensor[n, H]) for this rank's responses."""
        t, a = self.trainer, self.trainer.args
        micro = a.per_device_train_micro_batch_size
        t.actor.eval()
        entropy, hidden = entropy_and_last_hidden(t.actor, batch.input_ids, batch.attention_mask, batch.prompt_len,
                                                  batch.response_mask, a.temperature, micro)
        raw = {}
        for name in self.names:
            if name == "fmt":
                raw[name] = torch.tensor([self.format(None, c, None) for c in batch.completions])
            elif name == "len":
                lengths = batch.response_mask.sum(1).long().tolist()
                raw[name] = torch.tensor([linear_length_score(n, a.len_min, a.len_max) for n in lengths])
            elif name == "ent":
                raw[name] = entropy
            elif name == "ppl":
                p = batch.prompt_len
                pairs = [nover_tokens(t.tokenizer, batch.input_ids[i, :p][batch.attention_mask[i, :p].bool()].tolist(),
                                      completion, sample.get(a.answer_key), a.format_style)
                         for i, (completion, sample) in enumerate(zip(batch.completions, batch.samples))]
                raw[name] = reference_nll(t.actor, [c for c, _ in pairs], [g for _, g in pairs],
                                          t.tokenizer.pad_token_id, t.actor.device, micro)
            elif name == "pref":
                raw[name] = self.preference.score(batch.prompts, batch.completions)
            else:
                raw[name] = batch.correctness
        t.actor.train()
        return {k: v.float().cpu() for k, v in raw.items()}, hidden

    # --- hooks ------------------------------------------------------------------------------------------------
    def after_score(self, batch, timings):
        a, rank = self.trainer.args, self.trainer.rank
        t0 = time.perf_counter()
        raw, hidden = self.raw_rewards(batch)
        t1 = time.perf_counter()
        group_ids = dist.all_gather_cat(batch.group_ids)
        raw = {k: dist.all_gather_cat(v) for k, v in raw.items()}
        rewards = {k: group_rank_normalize(RANK_NORMALISED[k] * v, group_ids) if k in RANK_NORMALISED else v
                   for k, v in raw.items()}
        matrix = torch.stack([rewards[k] for k in self.names], dim=1)                       # [N, K] global
        probs = actions = None
        if a.maestro_weights == "conductor":
            h = dist.all_gather_cat(hidden)
            actions, probs = self.learner.act(h.to(self.learner.conductor.log_tau.device))
            self.pending = (h, actions)
        elif a.maestro_weights == "random":
            actions = self.learner.random_actions(len(group_ids))
        k = len(self.names)
        weights = emphasis_weights(actions, k, a.maestro_emphasis) if actions is not None else torch.full((len(group_ids), k), 1.0 / k)
        n = len(batch)
        mine = slice(rank * n, (rank + 1) * n)
        batch.components = {name: rewards[name][mine] for name in self.names}
        batch.actions = actions[mine] if actions is not None else None
        batch.scores = mixed_reward(matrix[mine], weights[mine])
        timings["maestro_rewards"] = t1 - t0
        timings["conductor"] = time.perf_counter() - t1
        metrics = {f"conductor/weight/{name}": weights[:, j].mean().item() for j, name in enumerate(self.names)}
        metrics.update({f"maestro/raw/{name}": v[~torch.isnan(v)].mean().item() if (~torch.isnan(v)).any()
                        else float("nan") for name, v in raw.items()})
        metrics["conductor/tau"] = self.learner.conductor.tau
        if probs is not None:
            metrics["conductor/entropy"] = -(probs * probs.log()).sum(-1).mean().item()
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
