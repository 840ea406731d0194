"""Multi-turn code: the model writes Python in a fenced block; the sandbox runs the tests; the score of a turn is
the pass rate; the feedback is the first failing test and its error.

Rows: MBPP style (`prompt`, `test_list`, optional `test_imports`) or HumanEval style (`prompt` = a function stub,
`test` defining check(candidate), `entry_point`). Train with e.g.
`--env code --data_path data/mbpp/sanitized.jsonl --prompt_key prompt --answer_key test_list --max_turns 3`.
"""
import re

from envs.base import VerifyAndRefineEnv, register_env
from rewards.code import run_tests

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
INSTRUCTION = "Write the solution as a Python function in a ```python code block."


def extract_code(text: str):
    """The last fenced code block (or an unterminated one at the end), else None."""
    blocks = _FENCE.findall(text)
    if blocks:
        return blocks[-1]
    open_block = re.search(r"```(?:python|py)?\s*\n(.*)$", text, re.DOTALL)
    return open_block.group(1) if open_block else None


class CodeVerifier:
    """fn(prompt, completion, sample) -> pass rate of the completion's code on the sample's tests."""

    def __init__(self, timeout_s: float = 5.0, memory_mb: int = 1024):
        self.limits = {"timeout_s": timeout_s, "memory_mb": memory_mb}

    @staticmethod
    def program_and_tests(code: str, sample: dict):
        if "entry_point" in sample:  # HumanEval: the stub's imports come first, check() gets the function
            return sample["prompt"] + "\n" + code, [sample["test"] + f"\ncheck({sample['entry_point']})"]
        return "\n".join(sample.get("test_imports") or []) + "\n" + code, list(sample["test_list"])

    def run(self, completion: str, sample: dict):
        code = extract_code(completion)
        if code is None:
            return 0.0, "No ```python code block was found in your answer."
        program, tests = self.program_and_tests(code, sample)
        result = run_tests(program, tests, **self.limits)
        return result.score, result.feedback

    def __call__(self, prompt, completion, sample) -> float:
        return self.run(completion, sample)[0]


@register_env("code")
class CodeEnv(VerifyAndRefineEnv):
    @classmethod
    def make_verifier(cls, **kwargs):
        return CodeVerifier()

    def first_message(self, sample: dict) -> str:
        return f"{sample[self.prompt_key]}\n\n{INSTRUCTION}"

    solved_feedback = ("All tests passed. You may keep this code or improve it; give the whole solution again in a "
                       "```python code block.")

    def verdict(self, model_text: str) -> tuple:
        return self.verifier.run(model_text, self.sample)

    def retry_feedback(self, score: float, detail) -> str:
        return f"Some tests failed.\n{detail}\nFix the code."

    def score_turn(self, model_text: str) -> float:
        return self.verifier.run(model_text, self.sample)[0]
