"""Graded verifier for multi-part arithmetic: the score is the fraction of the sub-answers that are right."""
import re

from rewards.arith import extract_final_number

_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
_EQUATION_RESULT = re.compile(r"=\s*(-?\d+)(?!\d|\.\d)")


def boxed_answers(text: str) -> list:
    """Every \\boxed{} integer in order (None where a box holds no integer)."""
    return [extract_final_number(f"\\boxed{{{b}}}") if b else None for b in _BOXED.findall(text)]


def equation_results(text: str) -> list:
    """The integer right after each `=` in order ("(1) 3 + 2 = 5" -> 5); a decimal such as "= 2.5" gives none."""
    return [int(n) for n in _EQUATION_RESULT.findall(text)]


def committed_answers(completion: str, num_parts: int) -> list:
    """The answers a response commits to, in order: its \\boxed{} values when it has at least one per part, else the
    results of its equations when it wrote more of those than boxes, else the boxes it has (credo's reading).

    The equation fallback is the multi-part counterpart of single-turn arith's "else the last number"
    (rewards/arith.py): SmolLM2-135M answers the three sums as "(1) 3 + 2 = 5" lines and almost never boxes them
    (1 of its 3,600 held-out sub-answers over three turns scored under boxes only), which leaves GRPO no signal
    to learn from (experiments/results/tcpo_vs_mtgrpo.preregistration.md, revision 1)."""
    boxes = boxed_answers(completion)
    if len(boxes) < num_parts:
        equations = equation_results(completion)
        if len(equations) > len(boxes):
            return equations
    return boxes


def parts_correct(completion: str, answers: list) -> list:
    """One bool per sub-answer. Answer j (committed_answers) answers part j; with more answers than parts the last
    len(answers) count (a model that restates its work ends with its final answers), credo's reading. Missing
    answers are wrong."""
    committed = committed_answers(completion, len(answers))
    if len(committed) > len(answers):
        committed = committed[-len(answers):]
    return [j < len(committed) and committed[j] is not None and committed[j] == int(a) for j, a in enumerate(answers)]


class MultiSumVerifier:
    """fn(prompt, completion, sample) -> fraction of sample['answer'] (a list of integers) answered right."""
    name = "correctness"

    def __call__(self, prompt, completion, sample) -> float:
        right = parts_correct(completion, sample["answer"])
        return sum(right) / len(right)
