"""The environment interface every task implements (single- or multi-turn)."""
import importlib
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

    Constructors take keyword arguments only and accept `prompt_key` / `answer_key` (the data fields of
    --prompt_key / --answer_key), ignoring them when the env generates its own rows.

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


def env_class(name: str):
    """A registered env by name, or a user's Env subclass by dotted path `package.module:ClassName`."""
    if name in ENVS:
        return ENVS[name]
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise KeyError(f"--env {name!r}: cannot import {attr} from {module_name} ({exc})") from None
        if not (isinstance(cls, type) and issubclass(cls, Env)):
            raise KeyError(f"--env {name!r} is not a subclass of envs.base.Env")
        return cls
    raise KeyError(f"--env {name!r} is not an environment; choose from {sorted(ENVS)} or give module:Class")


def make_env(name: str, **kwargs) -> Env:
    return env_class(name)(**kwargs)
