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
ROLLOUT_HOOKS = {}  # name -> fn(trainer, batch, timings) -> metrics: extra rollout work a method needs


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


def register_rollout_hook(name: str):
    def wrap(fn):
        ROLLOUT_HOOKS[name] = fn
        return fn
    return wrap


def get_estimator(name: str):
    if name not in ADVANTAGE_ESTIMATORS:
        raise KeyError(f"no advantage estimator named {name!r}; built: {sorted(ADVANTAGE_ESTIMATORS)}")
    return ADVANTAGE_ESTIMATORS[name]


def compute_advantages(name: str, batch: AdvantageInputs, args):
    if name not in BATCH_ADAPTERS:
        raise KeyError(f"no advantage estimator named {name!r}; built: {sorted(BATCH_ADAPTERS)}")
    return BATCH_ADAPTERS[name](batch, args)
