"""Moved: generation is rl/samplers.py, token layout rl/tokens.py, training log-probs rl/logprobs.py.

Kept only for rewards/policy_signals.py, which imports these two names until the layering step of issue 16 gives
it them by injection; delete this file then.
"""
from rl.logprobs import position_ids_from_mask  # noqa: F401
from rl.tokens import left_pad  # noqa: F401
