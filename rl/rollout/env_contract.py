"""The env contract (envs/README.md), checked on every call: `reset` returns chat messages, `step` a StepResult.

A user's env that returns the wrong thing is refused at its first call, with the env class and the method in the
message, instead of failing deep in the token layout (or, under the trainer's reward guard, being scored 0 for the
whole run). The checks are cheap next to a generate call, so every call is checked, not only the first.
"""
import numbers

from envs.base import StepResult
from rl.errors import TrainingAborted

EXAMPLE_MESSAGES = "[{'role': 'user', 'content': 'What is 2 + 3?'}]"


class EnvContractError(TrainingAborted, TypeError):
    """An env returned something the contract does not allow (a TrainingAborted: train.py prints it and exits 1)."""


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:80] + '...' if len(text) > 80 else text}"


def _message_problem(messages) -> str:
    """Why `messages` is not a list of chat messages, or '' when it is."""
    if not isinstance(messages, list):
        return f"returned {_shown(messages)}"
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            return f"returned a list whose item {i} is {_shown(m)}, not a message with str 'role' and 'content'"
    return ""


def check_reset(env, messages) -> list:
    """`messages` if it is a non-empty list of chat messages; else EnvContractError naming the env's reset."""
    problem = _message_problem(messages) or ("returned an empty list" if not messages else "")
    if problem:
        raise EnvContractError(f"{type(env).__name__}.reset {problem}; reset(sample) must return the chat messages "
                               f"that open the episode, e.g. {EXAMPLE_MESSAGES} (see envs/README.md)")
    return messages


def check_step_result(env, result) -> StepResult:
    """`result` if it is a well-formed StepResult; else EnvContractError naming the env's step."""
    where = f"{type(env).__name__}.step"
    if not isinstance(result, StepResult):
        raise EnvContractError(f"{where} returned {_shown(result)}; step(model_text) must return "
                               f"envs.base.StepResult(observation=[...], score=float, done=bool) (see envs/README.md)")
    if not _is_number(result.score):
        raise EnvContractError(f"{where} returned StepResult.score = {_shown(result.score)}; it must be a number")
    problem = _message_problem(result.observation)
    if problem:
        raise EnvContractError(f"{where} returned a StepResult whose observation {problem.removeprefix('returned ')}; "
                               f"it must be a list of chat messages ([] when done), e.g. {EXAMPLE_MESSAGES}")
    for name in ("components", "info"):
        if not isinstance(getattr(result, name), dict):
            raise EnvContractError(f"{where} returned StepResult.{name} = {_shown(getattr(result, name))}; it must "
                                   f"be a dict")
    bad = {k: v for k, v in result.components.items() if not _is_number(v)}
    if bad:
        raise EnvContractError(f"{where} returned StepResult.components with non-numeric values {bad}; each "
                               f"component is a number (a named part of the score)")
    return result


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real)


class ContractCheckedStep:
    """Stands in for one env's `step` during an episode: checks each result, and records a violation before raising
    it, so that the driver can stop the run even where a guard around `step` (the trainer's reward caller) catches
    the exception and scores the turn 0."""

    def __init__(self, env, violations: list):
        self.env, self.step, self.violations = env, env.step, violations

    def __call__(self, model_text: str) -> StepResult:
        try:
            return check_step_result(self.env, self.step(model_text))
        except EnvContractError as exc:
            self.violations.append(exc)
            raise


def numeric_step_values(result: StepResult) -> dict:
    """The numbers of one turn that reach the metrics: each component as `<name>`, each numeric info entry (bools
    count 0/1) as `info/<key>`; other info entries (ids, text) are left out."""
    values = {str(k): float(v) for k, v in result.components.items()}
    values.update({f"info/{k}": float(v) for k, v in result.info.items() if _is_number(v)})
    return values
