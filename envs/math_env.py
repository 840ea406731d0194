"""Single-turn math: the dataset's problem as the user turn, math-verify against its answer."""
from envs.base import Env, StepResult, register_env
from rewards.math import MathVerifier

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


@register_env("math")
class MathEnv(Env):
    max_turns = 1

    def __init__(self, verifier=None, prompt_key: str = "problem", answer_key: str = "answer", **unused):
        self.verifier = verifier or MathVerifier(answer_key=answer_key)
        self.prompt_key, self.answer_key = prompt_key, answer_key
        self.sample = None

    def reset(self, sample: dict) -> list:
        self.sample = sample
        return [{"role": "user", "content": f"{sample[self.prompt_key]}\n{INSTRUCTION}"}]

    def step(self, model_text: str) -> StepResult:
        score = self.verifier(self.sample[self.prompt_key], model_text, self.sample)
        return StepResult(observation=[], score=score, components={"correctness": score}, done=True)
