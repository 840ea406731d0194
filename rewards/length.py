"""Length reward: 1 when the reasoning part of the response is at most `limit` words, else 0."""
import re

_ANSWER_START = re.compile(r"\\boxed\{|<answer>")


def reasoning_part(completion: str) -> str:
    """Text before the final answer (before the last \\boxed{ or <answer>); the whole text if there is none."""
    starts = [m.start() for m in _ANSWER_START.finditer(completion)]
    return completion[:starts[-1]] if starts else completion


class LengthReward:
    def __init__(self, limit: int = 20):
        self.limit = limit
        self.name = "length"

    def __call__(self, prompt, completion, sample) -> float:
        return 1.0 if len(reasoning_part(completion).split()) <= self.limit else 0.0
