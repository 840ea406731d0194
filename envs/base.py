"""The environment interface every task implements (single- or multi-turn)."""
from dataclasses import dataclass, field

ENVS = {}


@dataclass
class StepResult:
    observation: list            # chat messages to append before the next turn ([] when done)
    score: float                 # verifier score of this turn, in [0, 1]
    components: dict = field(default_factory=dict)  # named reward parts of the score
    done: bool = True
    info: dict = field(default_factory=dict)


class Env:
    """One episode per instance. Subclasses set `max_turns` and implement reset/step.

    `dataset(split, n, seed)` returns the rows an env draws prompts from when it generates its own data (arith);
    data-backed envs (math) take rows from --data_path instead and return None.
    """
    max_turns = 1

    def reset(self, sample: dict) -> list:
        raise NotImplementedError

    def step(self, model_text: str) -> StepResult:
        raise NotImplementedError

    @classmethod
    def dataset(cls, split: str, n: int, seed: int):
        return None


def register_env(name: str):
    def wrap(cls):
        ENVS[name] = cls
        return cls
    return wrap


def make_env(name: str, **kwargs) -> Env:
    if name not in ENVS:
        raise KeyError(f"--env {name!r} is not an environment; choose from {sorted(ENVS)}")
    return ENVS[name](**kwargs)
