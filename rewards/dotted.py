"""Load a user's object from `package.module:name` (custom envs and reward functions).

It lives in rewards/, credo's lowest layer (envs/ and rl/ import it; it imports neither), because both
rewards/registry.py (`--reward_funcs pkg.mod:fn`) and envs/base.py (`--env pkg.mod:Class`) resolve such paths.
"""
import importlib


def load_dotted(spec: str, flag: str):
    """The object named by spec; KeyError naming the flag when it cannot be imported."""
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise KeyError(f"{flag} {spec!r}: cannot import {attr} from {module_name} ({exc})") from None
