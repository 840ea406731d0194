"""Name -> advantage estimator, as in verl's core_algos: the trainer looks a name up, never branches on it.

Each method registers two things under its --algo name:
- the pure tensor function (public API, e.g. rl.advantages.grpo), and
- an adapter `from_batch(batch: AdvantageInputs, args) -> (Tensor[N] advantages, dict of metrics)` that maps
  the trainer's batch-global tensors and flags onto the pure function's arguments.
"""
from dataclasses import dataclass, field

import torch

ADVANTAGE_ESTIMATORS = {}
BATCH_ADAPTERS = {}
STEP_HOOKS = {}  # name -> StepHooks subclass: a method's extra work around the advantages, and its state


@dataclass
class AdvantageInputs:
    """Batch-global inputs (every rank's responses, in rank order) for one step's advantages."""
    scores: torch.Tensor                 # Tensor[N] scalar reward per response
    group_ids: torch.Tensor              # Tensor[N] long
    lengths: torch.Tensor                # Tensor[N] number of response tokens
    components: dict = field(default_factory=dict)  # reward name -> Tensor[N], NaN = abstained (ordered)
    correctness: torch.Tensor = None     # Tensor[N] the env verifier's trajectory score
    turn_scores: torch.Tensor = None     # Tensor[N, T] verifier score per turn, NaN after a trajectory ended
    counterfactual: torch.Tensor = None  # Tensor[N, T] TCPO fixed-history counterfactuals (NaN = none)
    actions: torch.Tensor = None         # Tensor[N] long MAESTRO Conductor emphasis actions (None = equal weights)

    def component_matrix(self) -> torch.Tensor:
        """Tensor[N, K], columns in the order of `components`."""
        return torch.stack(list(self.components.values()), dim=1)


def register(name: str):
    def wrap(fn):
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} registered twice")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn
    return wrap


def register_adapter(name: str):
    def wrap(fn):
        BATCH_ADAPTERS[name] = fn
        return fn
    return wrap


class StepHooks:
    """A method's work around the advantage computation and the state it carries from step to step.

    The default does nothing. TCPO samples counterfactual turns after scoring; MAESTRO computes its
    policy-based rewards and Conductor actions after scoring and trains the Conductor after the advantages.
    The state is saved in every checkpoint and restored by --resume.
    """

    def __init__(self, trainer):
        self.trainer = trainer

    def after_score(self, batch, timings: dict) -> dict:
        """May fill method fields of the local Rollout (counterfactual, actions, components). Returns metrics."""
        return {}

    def after_advantages(self, inputs: AdvantageInputs, advantages: torch.Tensor, timings: dict) -> dict:
        """Sees the batch-global inputs and advantages (Tensor[N] or [N, T]). Returns metrics."""
        return {}

    def state_dict(self) -> dict:
        """A copy (not views of live tensors): the trainer keeps it to undo a step that fails."""
        return {}

    def load_state_dict(self, state: dict):
        pass


def register_step_hooks(name: str):
    def wrap(cls):
        STEP_HOOKS[name] = cls
        return cls
    return wrap


def build_step_hooks(name: str, trainer) -> StepHooks:
    return STEP_HOOKS.get(name, StepHooks)(trainer)


def get_estimator(name: str):
    if name not in ADVANTAGE_ESTIMATORS:
        raise KeyError(f"no advantage estimator named {name!r}; built: {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[name]


def compute_advantages(name: str, batch: AdvantageInputs, args):
    if name not in BATCH_ADAPTERS:
        raise KeyError(f"no advantage estimator named {name!r}; built: {sorted(BATCH_ADAPTERS)}")
    return BATCH_ADAPTERS[name](batch, args)
