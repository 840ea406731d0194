"""Environments: reset(sample) -> chat messages; step(model_text) -> StepResult. Registry by --env name."""
from envs.base import Env, StepResult, ENVS, env_class, env_class_from_flags, make_env, register_env
import envs.arith  # noqa: F401  (registers "arith")
import envs.arith_multi  # noqa: F401  (registers "arith_multi": three sums, graded scores)
import envs.math_env  # noqa: F401  (registers "math")
import envs.code_env  # noqa: F401  (registers "code")
import envs.mixed  # noqa: F401  (registers "mixed": arithmetic + free-form, for MAESTRO)
import envs.appworld  # noqa: F401  (registers "appworld")
import envs.toolcall  # noqa: F401  (registers "toolcall": BFCL tool calls, DARA's setting)

__all__ = ["Env", "StepResult", "ENVS", "env_class", "env_class_from_flags", "make_env", "register_env"]
