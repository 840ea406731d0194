"""Math problems scored by math-verify against the dataset's answer; multi-turn verify-and-refine with
--max_turns > 1 (the feedback says the answer is wrong, never what the answer is)."""
from envs.base import VerifyAndRefineEnv, register_env
from rewards.math import MathVerifier

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


@register_env("math")
class MathEnv(VerifyAndRefineEnv):
    # a worked solution needs room (credo's reading: the length the README's GPU recipe halves; CPU runs pass less)
    default_max_answer_seq_len = 512
    default_eval_data = "data/math500/test.jsonl"  # MATH-500: evaluation only; train on data/math_train/train.jsonl
    @classmethod
    def make_verifier(cls, answer_key: str = "answer", **kwargs):
        return MathVerifier(answer_key=answer_key)

    def first_message(self, sample: dict) -> str:
        return f"{sample[self.prompt_key]}\n{INSTRUCTION}"

    def sft_target(self, row: dict) -> str:
        """A worked solution when the row has one (MATH's `solution`), else the boxed answer alone (credo's reading:
        data/math_train keeps answers only, so its warm start teaches the answer's format, not the reasoning)."""
        solution = row.get("solution")
        if isinstance(solution, str) and "\\boxed" in solution:
            return solution
        return f"The final answer is \\boxed{{{row[self.answer_key]}}}."
