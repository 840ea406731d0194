"""Load a user's object from `package.module:name` (custom envs and reward functions)."""
import importlib


def load_dotted(spec: str, flag: str):
    """The object named by spec; KeyError naming the flag when it cannot be imported."""
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise KeyError(f"{flag} {spec!r}: cannot import {attr} from {module_name} ({exc})") from None
