"""Reference-model sync (--sync_ref_model, --ref_model_mixup_alpha, --ref_model_sync_steps: TRL's names and
defaults, GRPOConfig and trl/trainer/callbacks.py SyncRefModelCallback): every N steps the frozen reference moves
toward the policy,
    pi_ref <- alpha * pi_theta + (1 - alpha) * pi_ref,
parameter by parameter (TR-DPO, Gorbatovski et al. 2024, arXiv 2404.09656, its "soft update" with alpha and tau; TRL
applies the same rule to GRPO's KL reference).

Where credo's reading differs from TRL's code: N counts credo's steps (one rollout and its update) where TRL counts
optimizer steps (the same with one optimizer step per rollout, the default; with --ppo_mini_batch_size or
--ppo_epochs giving several, the sync comes after the step's last one, and the reference log-probs, computed once
per rollout, could not see an earlier one anyway); the mix is computed in float32 and rounded once to the weights'
dtype (TRL mixes in the weights' dtype).

A reference exists only when something reads it: --beta > 0 (the KL term) or MAESTRO's --maestro_kl_in_reward. With
neither, --sync_ref_model is refused, as TRL refuses it under beta = 0. LoRA is refused too (the reference is the
actor with its adapters off, or a copy without adapters: no parameters to mix one to one), as TRL refuses PEFT.
The mixed reference is part of the run's state: a checkpoint carries it (state_dict) and a resume restores it.
"""
import argparse
import contextlib
from dataclasses import dataclass

import torch

from rl.engine import dist


def mix_(reference: torch.Tensor, policy: torch.Tensor, alpha: float) -> None:
    """reference <- alpha * policy + (1 - alpha) * reference, in place, computed in float32."""
    mixed = policy.detach().float() * alpha + reference.detach().float() * (1.0 - alpha)
    reference.data.copy_(mixed.to(reference.dtype))


def _gathered(param, modifier_rank=None):
    """DeepSpeed's GatheredParameters for a ZeRO-3 parameter (a collective), else nothing to do."""
    if not hasattr(param, "ds_id"):
        return contextlib.nullcontext()
    import deepspeed
    return deepspeed.zero.GatheredParameters([param], modifier_rank=modifier_rank)


def _module(engine):
    return getattr(engine, "module", engine)


@dataclass(frozen=True)
class RefSyncSettings:
    sync_ref_model: bool = False
    ref_model_mixup_alpha: float = 0.6
    ref_model_sync_steps: int = 512

    @classmethod
    def from_args(cls, args) -> "RefSyncSettings":
        return cls(args.sync_ref_model, args.ref_model_mixup_alpha, args.ref_model_sync_steps)


class ReferenceSync:
    """Mixes the policy into the reference after every --ref_model_sync_steps-th step. Each method is a collective
    under ZeRO-3 (every rank calls it): parameters are gathered one at a time, mixed on rank 0 and partitioned back
    (TRL's GatheredParameters(modifier_rank=0), one parameter at a time instead of the whole model)."""

    def __init__(self, settings: RefSyncSettings, actor, reference):
        self.settings = settings
        self.actor, self.reference = actor, reference
        self.active = settings.sync_ref_model and reference is not None

    def _pairs(self):
        policy = dict(_module(self.actor).named_parameters())
        for name, ref in _module(self.reference).named_parameters():
            if name not in policy or policy[name].shape != ref.shape:
                raise ValueError(f"--sync_ref_model: the reference's {name} has no counterpart of the same shape in "
                                 "the policy")
            yield ref, policy[name]

    def after_step(self, step: int) -> dict:
        """Mix when `step` (1-based, the step just trained) is a multiple of --ref_model_sync_steps. Returns
        {"ref/synced": 1.0 or 0.0} when syncing is on, else {}."""
        if not self.active:
            return {}
        if step % self.settings.ref_model_sync_steps:
            return {"ref/synced": 0.0}
        for ref, policy in self._pairs():
            with _gathered(policy), _gathered(ref, modifier_rank=0):
                if not hasattr(ref, "ds_id") or dist.rank() == 0:
                    mix_(ref, policy, self.settings.ref_model_mixup_alpha)
        return {"ref/synced": 1.0}

    def state_dict(self) -> dict:
        """The reference's weights when syncing has changed them (rank 0 holds them; {} elsewhere and without
        syncing, whose reference is the model it was loaded from). A collective under ZeRO-3."""
        if not self.active:
            return {}
        state = {}
        for name, ref in _module(self.reference).named_parameters():
            with _gathered(ref):
                if dist.rank() == 0:
                    state[name] = ref.detach().to("cpu", copy=True)
        return state

    def load_state_dict(self, state) -> None:
        """Restore what state_dict saved. Under ZeRO-3 only rank 0's checkpoint holds the weights and the others
        receive them when each parameter is partitioned back; below it every rank reads rank 0's file."""
        if not self.active:
            return
        have = bool(dist.all_reduce(torch.tensor([1.0 if state else 0.0]), op="max").item())
        if not have:
            raise ValueError("--sync_ref_model: the checkpoint holds no reference weights (it was saved without "
                             "--sync_ref_model); resuming would restart from the initial reference")
        for name, ref in _module(self.reference).named_parameters():
            with _gathered(ref, modifier_rank=0):
                if state and (not hasattr(ref, "ds_id") or dist.rank() == 0):
                    ref.data.copy_(state[name].to(ref.device, ref.dtype))


def add_ref_sync_flags(p):
    g = p.add_argument_group("update: reference-model sync (TR-DPO's soft update, TRL's names)")
    g.add_argument("--sync_ref_model", action=argparse.BooleanOptionalAction, default=None,
                   help="default off (on under MAESTRO's --maestro_recipe paper): every --ref_model_sync_steps "
                        "steps, reference <- alpha x policy + (1 - alpha) x reference (TRL's sync_ref_model, from "
                        "TR-DPO, arXiv 2404.09656). Needs a reference: --beta > 0 (or MAESTRO's "
                        "--maestro_kl_in_reward); refused under --beta 0 and with --lora_r, as TRL refuses both")
    g.add_argument("--ref_model_mixup_alpha", type=float, default=0.6,
                   help="alpha of the mix (TRL's ref_model_mixup_alpha, default 0.6)")
    g.add_argument("--ref_model_sync_steps", type=int, default=512,
                   help="steps between syncs (TRL's ref_model_sync_steps, default 512; TR-DPO's tau). credo counts "
                        "training steps (one rollout and its update), TRL optimizer steps: the same with one "
                        "optimizer step per rollout")


def validate_ref_sync(args, bad) -> None:
    args.sync_ref_model = bool(args.sync_ref_model)  # unset: off, unless a recipe (MAESTRO's paper) set it before
    if not 0 <= args.ref_model_mixup_alpha <= 1:
        bad(f"--ref_model_mixup_alpha must be in [0, 1], got {args.ref_model_mixup_alpha}")
    if args.ref_model_sync_steps < 1:
        bad(f"--ref_model_sync_steps must be >= 1, got {args.ref_model_sync_steps}")
    if not args.sync_ref_model:
        return
    if not getattr(args, "uses_reference", args.beta != 0):  # no KL term and no method reading the reference
        bad("--sync_ref_model moves the reference toward the policy, but --beta 0 loads no reference (nothing reads "
            "it): set --beta > 0, or drop --sync_ref_model")
    if getattr(args, "lora_r", 0):
        bad("--sync_ref_model with --lora_r: a LoRA run's reference is the actor with its adapters off (or a copy "
            "without adapters), with no parameters to mix one to one; train without LoRA to sync the reference")
