"""Credit-assignment methods as plugins: every module of this package that defines a `Method` subclass with a
`name` is one `--algo` choice. Adding a method is adding a module (README, "Adding a method")."""
import importlib
import pkgutil

from rl.methods.base import Method, StepContext, config_from_args

__all__ = ["METHODS", "Method", "StepContext", "build_method", "method_class", "method_names", "config_from_args"]


def _discover() -> dict:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.name == "base" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Method) and obj.__module__ == module.__name__ and obj.name:
                if obj.name in found:
                    raise ValueError(f"two methods named {obj.name!r}: {found[obj.name].__module__} and {module.__name__}")
                found[obj.name] = obj
    return found


METHODS = _discover()  # --algo name -> Method subclass, alphabetical


def method_names() -> tuple:
    return tuple(METHODS)


def method_class(name: str) -> type:
    if name not in METHODS:
        raise KeyError(f"no method named {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]


def build_method(name: str, args, ctx: StepContext = None) -> Method:
    """The --algo method, its Config read from the parsed flags (Method.from_args)."""
    return method_class(name).from_args(args, ctx)
