"""Advantage estimators: one module per method, each a pure tensor function exported under the module's name.

Every module here is imported below, and a module's function of the module's own name is exported:
`from rl.advantages import grpo` is the function rl/advantages/grpo.py defines. A new method adds its maths as
rl/advantages/<name>.py and its training glue as rl/methods/<name>.py (README, "Adding a method"); no list to edit.
"""
import importlib
import pkgutil

__all__ = []

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    if callable(getattr(_module, _info.name, None)):
        globals()[_info.name] = getattr(_module, _info.name)  # the function shadows its module's name, as before
        __all__.append(_info.name)
