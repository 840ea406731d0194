"""Advantage estimators: one module per method, each a pure tensor function registered by name.

To add a method: copy grpo.py, change the maths, the @register / @register_adapter name, and import it here.
"""
from rl.advantages.registry import (ADVANTAGE_ESTIMATORS, AdvantageInputs, compute_advantages, get_estimator,
                                    register, register_adapter)
from rl.advantages.grpo import grpo
from rl.advantages.gdpo import gdpo
from rl.advantages.dara import dara
from rl.advantages.tcpo import tcpo
from rl.advantages.mt_grpo import mt_grpo
from rl.advantages.maestro import maestro
import rl.advantages.turn_adapters  # noqa: F401  (registers the tcpo / mt_grpo adapters)

__all__ = ["ADVANTAGE_ESTIMATORS", "AdvantageInputs", "compute_advantages", "get_estimator", "register",
           "register_adapter", "grpo", "gdpo", "dara", "tcpo", "mt_grpo", "maestro"]
