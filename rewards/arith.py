"""Integer-answer verifier for the arithmetic env: the \\boxed{} answer when present, else the last number."""
import re

_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_final_number(text: str):
    """The integer a response commits to, or None. `\\boxed{12}` wins over any other number in the text."""
    boxed = _BOXED.findall(text)
    candidates = [_NUMBER.findall(b) for b in boxed]
    candidates = [c[-1] for c in candidates if c]
    if not candidates:
        candidates = _NUMBER.findall(text)
    if not candidates:
        return None
    token = candidates[-1].replace(",", "")
    try:
        value = float(token)
    except ValueError:
        return None
    return int(value) if value == int(value) else None


class ArithVerifier:
    """Scores 1.0 when the response's final integer equals sample['answer'], else 0.0."""
    name = "correctness"

    def __call__(self, prompt, completion, sample) -> float:
        predicted = extract_final_number(completion)
        return float(predicted is not None and predicted == int(sample["answer"]))
