"""An env with a dense, learnable reward for the launcher tests: a random tiny model almost never gets a sum
right, so arith's 0/1 score would leave every group constant and every advantage 0."""
from envs.arith import ArithEnv
from envs.base import StepResult


class DigitFractionEnv(ArithEnv):
    """Score = fraction of the response's characters that are digits."""

    def step(self, model_text: str) -> StepResult:
        score = sum(c.isdigit() for c in model_text) / max(len(model_text), 1)
        return StepResult(observation=[], score=score, components={"digits": score}, done=True)


class BrokenVerifierEnv(ArithEnv):
    """A verifier that always raises, as a reward server that is down would."""

    def step(self, model_text: str) -> StepResult:
        raise ConnectionError("reward server unreachable")


def half_reward(prompt, completion, sample):
    """A user reward with two components, one of which abstains."""
    return {"half": 0.5, "judge": None}
