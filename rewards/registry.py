"""--reward_funcs names -> reward functions.

`correctness` is the env's own verifier score; `format` and `length` are built in; any other name is a user's
function given as `package.module:function` with the signature fn(prompt, completion, sample) returning a float,
a dict of named components, or None to abstain.
"""
from rewards.format import FormatReward
from rewards.length import LengthReward, LinearLengthReward
from rl.dotted import load_dotted

CORRECTNESS = "correctness"
BUILT_IN_REWARDS = {
    "format": lambda args: FormatReward(args.format_style),
    "length": lambda args: LengthReward(args.length_limit),
    "length_linear": lambda args: LinearLengthReward(args.len_min, args.len_max),
}


def build_reward_fn(name: str, args):
    """The callable for a --reward_funcs entry other than `correctness`; KeyError with a readable message."""
    if name in BUILT_IN_REWARDS:
        return BUILT_IN_REWARDS[name](args)
    if ":" in name:
        fn = load_dotted(name, "--reward_funcs")
        if not callable(fn):
            raise KeyError(f"--reward_funcs {name} is not callable")
        return fn
    raise KeyError(f"--reward_funcs: unknown reward {name!r}; built in: {', '.join([CORRECTNESS, *BUILT_IN_REWARDS])}, "
                   f"or give package.module:function")
