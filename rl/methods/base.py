"""What a credit-assignment method is to the trainer: one class per method, in its own module of rl/methods/.

A method owns its flags (`add_flags`), their checks (`validate`), the adapter from the batch-global view to its pure
maths in rl/advantages/ (`advantages`), its extra work around scoring and the advantages, and the state that work
carries from step to step (saved in every checkpoint, restored by --resume). The trainer never branches on a
method's name: it calls these in the order of one step (README, "How one step flows").
"""
from dataclasses import dataclass, fields

import torch

from rl.types import GlobalBatch


@dataclass
class StepContext:
    """The pieces of a training run a method's hooks may use (never the whole Trainer)."""
    actor: object                 # the DeepSpeed engine of the policy
    tokenizer: object
    reference: object = None      # the frozen reference engine (None when --beta 0 and no method asked for it)
    sampler: object = None        # the rollout's rl.rollout.samplers.Sampler (TCPO's counterfactuals generate with it)
    score_alternative: object = None  # (env, text, turn) -> the score text would have got as that turn, or None
    rank: int = 0
    world: int = 1


def config_from_args(config_cls, args, **derived):
    """A method's typed flag section: the dataclass `config_cls` filled from the parsed flags of its field names; a
    field given in `derived` (a value the method computes from several flags) is taken from there instead."""
    return config_cls(**{f.name: derived[f.name] if f.name in derived else getattr(args, f.name)
                         for f in fields(config_cls)})


class Method:
    """The default does nothing around the advantages; a subclass sets `name` and implements `advantages`."""
    name = None              # the --algo value; a module's Method subclass with a name is registered
    summary = ""             # one line for --algo's help
    Config = None            # dataclass of the flags the method reads (field name = flag name); self.config
    turn_level = False       # advantages per turn: needs --max_turns >= 2
    min_rewards = 1          # reward components its advantage needs
    fixed_turns = False      # --episode_end auto plays every turn (its paper's protocol) instead of stopping at success

    # --- flags (class level: used before any run exists) -------------------------------------------------
    @classmethod
    def add_flags(cls, parser) -> None:
        """Add the method's own argument group (flags prefixed by the method's name)."""

    @classmethod
    def check_flags(cls, args, bad) -> None:
        """Called whatever --algo is: refuse the method's flags where they would silently do nothing."""

    @classmethod
    def validate(cls, args, bad) -> None:
        """Called when --algo is this method, after the general checks; `bad(msg)` exits naming the flag."""

    @classmethod
    def reward_names(cls, args) -> list:
        """The rewards the scorer computes for this method (default --reward_funcs)."""
        return list(args.reward_funcs)

    @classmethod
    def needs_reference(cls, args) -> bool:
        """Whether the method itself reads the frozen reference model, whatever --beta (MAESTRO's KL in the reward).
        The parser records `args.uses_reference` from it, so the engine and the reference sync never name a method's
        flag."""
        return False

    @classmethod
    def from_args(cls, args, ctx: StepContext = None) -> "Method":
        """The method with its Config filled from the parsed flags (the trainer's only hand-over of the flags)."""
        return cls(config_from_args(cls.Config, args) if cls.Config is not None else None, ctx)

    # --- one step ---------------------------------------------------------------------------------------
    def __init__(self, config=None, ctx: StepContext = None):
        self.config = config  # an instance of Config: every flag the method reads
        self.ctx = ctx

    def sampling_signals(self) -> frozenset:
        """What the sampling pass records for this method's hooks instead of a forward of their own
        (rl/rollout/sampling_signals.py: "logp", "entropy", "hidden"); none by default."""
        return frozenset()

    # Optional hooks: None when the method has none, and then the trainer and the scorer skip the call, so a default
    # step never enters this file (README, "How one step flows"). A method that has one defines it as a method:
    #   after_score(self, batch: Rollout, timings: dict) -> dict
    #       may put method data in batch.extras (the same keys on every rank); returns metrics (TCPO, MAESTRO).
    #   scalarize(self, batch: Rollout, components: dict) -> Tensor[n]
    #       called by the scorer instead of its --reward_weights sum of components: a method that mixes rewards per
    #       response returns this rank's rows' scalar rewards (MAESTRO's Conductor draws each response's weights).
    #   after_advantages(self, batch: GlobalBatch, advantages: Tensor, timings: dict) -> dict
    #       sees the batch-global view and its advantages; returns metrics (MAESTRO's Conductor update).
    after_score = None
    scalarize = None
    after_advantages = None

    @classmethod
    def weighs_rewards_while_scoring(cls) -> bool:
        """Whether the method has a `scalarize` hook (MAESTRO's Conductor draws each response's weights there)."""
        return cls.scalarize is not None

    def advantages(self, batch: GlobalBatch):
        """(Tensor[N] or Tensor[N, T] advantages, metrics) from the batch-global view."""
        raise NotImplementedError(f"method {self.name!r} defines no advantages")

    def state_dict(self) -> dict:
        """A copy (not views of live tensors): the trainer keeps it to undo a step that fails."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def resolve_weights(args, flag: str, bad) -> None:
    """--flag "1,0.5" -> [1.0, 0.5] in place (None stays None), refused by name when it is not a number list or
    (when every reward is a built-in) its length differs from the number of reward components."""
    value = getattr(args, flag)
    if value is None or isinstance(value, list):
        return
    try:
        setattr(args, flag, [float(x) for x in value.split(",")])
    except ValueError:
        bad(f"--{flag} {value}: expected comma-separated numbers")
    from rewards.registry import known_component_count
    count = known_component_count(args.reward_funcs)  # else checked at the first scored batch
    if count is not None and len(getattr(args, flag)) != count:
        bad(f"--{flag} has {len(getattr(args, flag))} entries for {count} rewards ({','.join(args.reward_funcs)})")


def weights_tensor(values, batch: GlobalBatch, flag: str):
    """A parsed weight list as Tensor[K] float64 matching batch.components (None stays None)."""
    if values is None:
        return None
    if len(values) != len(batch.components):
        raise ValueError(f"--{flag} has {len(values)} entries for {len(batch.components)} reward components "
                         f"({', '.join(batch.components)})")
    return torch.tensor(values, dtype=torch.float64)


def add_advantage_flags(p):
    """The advantage flags several methods share (each method's own are its add_flags)."""
    g = p.add_argument_group("advantages (shared by several methods)")
    g.add_argument("--scale_rewards", choices=("group", "batch", "none"), default="group",
                   help="GRPO std scaling: group std, batch std, or none (Dr.GRPO)")
    g.add_argument("--final_norm", choices=("response", "token", "none"), default="response",
                   help="GDPO/DARA/GD²PO-Hard batch normalisation of the summed advantage (token = verl's masked "
                        "whitening; GD²PO-Hard: over the kept responses; DVAO has none, as the DARA authors' code)")
