"""--reward_funcs names -> reward functions.

`correctness` is the env's own verifier score; `format`, `length`, `length_linear` and DARA's tool-calling and budget
rewards (`tool_format`, `tool_correct`, `think_length`, `length_budget`: rewards/toolcall.py) are built in; any other
name is a user's function given as `package.module:function`, either credo's fn(prompt, completion, sample) returning
a float, a dict of named components, or None to abstain, or TRL's batched f(prompts, completions, **kwargs) returning
a list of floats or None (rewards/conventions.py tells them apart by signature, when the flags are parsed).
"""
import pickle
from dataclasses import dataclass, fields

from rewards.conventions import reward_style
from rewards.dotted import load_dotted
from rewards.format import FormatReward
from rewards.length import DEFAULT_LEN_MAX, DEFAULT_LEN_MIN, LengthReward, LinearLengthReward
from rewards.toolcall import DEFAULT_THINK_LIMIT, TOOLCALL_REWARDS

CORRECTNESS = "correctness"


@dataclass(frozen=True)
class BuiltInRewardSettings:
    """The built-in rewards' own settings, one field per flag of the same name. The defaults here are the flags'
    (add_builtin_reward_flags; DARA's in rewards/toolcall.py, --len_min / --len_max in rewards/policy_rewards.py)."""
    format_style: str = "boxed"          # format: boxed, tags, or a regular expression
    length_limit: int = 20               # length: words before the final answer
    len_min: int = DEFAULT_LEN_MIN       # length_linear (and the in-process `len`): 1 up to len_min tokens ...
    len_max: int = DEFAULT_LEN_MAX       # ... falling to 0 at len_max
    tool_correct_mode: str = "ast"       # tool_correct: ast or toolrl
    think_length_limit: int = DEFAULT_THINK_LIMIT  # think_length: words in the last <think> block
    length_budget_tokens: int = None     # length_budget: the budget in tokens

    @classmethod
    def from_args(cls, args) -> "BuiltInRewardSettings":
        """A parser without some of these flags (eval.py's, a test's) leaves those settings at their defaults."""
        return cls(**{f.name: getattr(args, f.name, f.default) for f in fields(cls)})


BUILT_IN_REWARDS = {  # name -> builder(BuiltInRewardSettings)
    "format": lambda settings: FormatReward(settings.format_style),
    "length": lambda settings: LengthReward(settings.length_limit),
    "length_linear": lambda settings: LinearLengthReward(settings.len_min, settings.len_max),
    **TOOLCALL_REWARDS,
}


def add_builtin_reward_flags(group):
    """--format_style and --length_limit (the format and length rewards')."""
    group.add_argument("--format_style", default=BuiltInRewardSettings.format_style,
                       help="format reward: boxed, tags, or a regular expression")
    group.add_argument("--length_limit", type=int, default=BuiltInRewardSettings.length_limit,
                       help="length reward: 1 when the reasoning part (before the final answer) has at most this many "
                            "words")


@dataclass(frozen=True)
class RewardSpec:
    """What a reward worker process needs to load and call one --reward_funcs entry."""
    name: str     # metric name: reward/<name>/...
    target: tuple  # ("import", "pkg.module:fn") or ("pickle", bytes) for a built-in's configured object
    style: str    # rewards.conventions.CREDO or TRL


def build_reward_fn(name: str, settings: BuiltInRewardSettings):
    """The callable for a --reward_funcs entry other than `correctness`; KeyError with a readable message
    (an unknown name, an import that fails, or a signature that fits neither convention)."""
    if name in BUILT_IN_REWARDS:
        return BUILT_IN_REWARDS[name](settings)
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


def reward_spec(name: str, settings: BuiltInRewardSettings) -> RewardSpec:
    fn = build_reward_fn(name, settings)
    if name in BUILT_IN_REWARDS:  # length_budget is TRL-style (it counts the sampled completion_ids)
        return RewardSpec(name, ("pickle", pickle.dumps(fn)), reward_style(fn, name))
    # by import path, so that the worker imports the user's module itself (closures and lambdas need not pickle)
    return RewardSpec(name.rpartition(":")[2], ("import", name), reward_style(fn, name))


def known_component_count(names) -> int:
    """How many reward components --reward_funcs produce, when that is known before any call: every built-in
    reward is one component; a user function (module:function) may return a dict of its own, so then None."""
    return None if any(":" in name for name in names) else len(names)
