"""Graded verifier for multi-part arithmetic: the score is the fraction of the sub-answers that are right."""
import re

from rewards.arith import extract_final_number

_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")


def boxed_answers(text: str) -> list:
    """Every \\boxed{} integer in order (None where a box holds no integer)."""
    return [extract_final_number(f"\\boxed{{{b}}}") if b else None for b in _BOXED.findall(text)]


def parts_correct(completion: str, answers: list) -> list:
    """One bool per sub-answer. Box j answers part j; with more boxes than parts the last len(answers) count (a
    model that restates its work ends with its final answers), credo's reading. Missing boxes are wrong."""
    boxes = boxed_answers(completion)
    if len(boxes) > len(answers):
        boxes = boxes[-len(answers):]
    return [j < len(boxes) and boxes[j] is not None and boxes[j] == int(a) for j, a in enumerate(answers)]


class MultiSumVerifier:
    """fn(prompt, completion, sample) -> fraction of sample['answer'] (a list of integers) answered right."""
    name = "correctness"

    def __call__(self, prompt, completion, sample) -> float:
        right = parts_correct(completion, sample["answer"])
        return sum(right) / len(right)
