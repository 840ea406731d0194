"""--reward_funcs names -> reward functions.

`correctness` is the env's own verifier score; `format`, `length`, `length_linear` and DARA's tool-calling and budget
rewards (`tool_format`, `tool_correct`, `think_length`, `length_budget`: rewards/toolcall.py) are built in; any other
name is a user's function given as `package.module:function`, either credo's fn(prompt, completion, sample) returning
a float, a dict of named components, or None to abstain, or TRL's batched f(prompts, completions, **kwargs) returning
a list of floats or None (rewards/conventions.py tells them apart by signature, when the flags are parsed).
"""
import pickle
from dataclasses import dataclass

from rewards.conventions import reward_style
from rewards.dotted import load_dotted
from rewards.format import FormatReward
from rewards.length import LengthReward, LinearLengthReward
from rewards.toolcall import TOOLCALL_REWARDS

CORRECTNESS = "correctness"
BUILT_IN_REWARDS = {
    "format": lambda args: FormatReward(args.format_style),
    "length": lambda args: LengthReward(args.length_limit),
    "length_linear": lambda args: LinearLengthReward(args.len_min, args.len_max),
    **TOOLCALL_REWARDS,
}


@dataclass(frozen=True)
class RewardSpec:
    """What a reward worker process needs to load and call one --reward_funcs entry."""
    name: str     # metric name: reward/<name>/...
    target: tuple  # ("import", "pkg.module:fn") or ("pickle", bytes) for a built-in's configured object
    style: str    # rewards.conventions.CREDO or TRL


def build_reward_fn(name: str, args):
    """The callable for a --reward_funcs entry other than `correctness`; KeyError with a readable message
    (an unknown name, an import that fails, or a signature that fits neither convention)."""
    if name in BUILT_IN_REWARDS:
        return BUILT_IN_REWARDS[name](args)
    if ":" in name:
        fn = load_dotted(name, "--reward_funcs")
        if not callable(fn):
            raise KeyError(f"--reward_funcs {name} is not callable")
        try:
            reward_style(fn, f"--reward_funcs {name}")
        except ValueError as exc:
            raise KeyError(str(exc)) from None
        return fn
    from rewards.policy_rewards import POLICY_REWARDS  # in-process rewards, scored by rl/scoring.py, not here
    raise KeyError(f"--reward_funcs: unknown reward {name!r}; built in: "
                   f"{', '.join([CORRECTNESS, *BUILT_IN_REWARDS, *POLICY_REWARDS])}, "
                   f"or give package.module:function")


def reward_spec(name: str, args) -> RewardSpec:
    fn = build_reward_fn(name, args)
    if name in BUILT_IN_REWARDS:  # length_budget is TRL-style (it counts the sampled completion_ids)
        return RewardSpec(name, ("pickle", pickle.dumps(fn)), reward_style(fn, name))
    # by import path, so that the worker imports the user's module itself (closures and lambdas need not pickle)
    return RewardSpec(name.rpartition(":")[2], ("import", name), reward_style(fn, name))


def known_component_count(names) -> int:
    """How many reward components --reward_funcs produce, when that is known before any call: every built-in
    reward is one component; a user function (module:function) may return a dict of its own, so then None."""
    return None if any(":" in name for name in names) else len(names)
