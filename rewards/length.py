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


DEFAULT_LEN_MIN, DEFAULT_LEN_MAX = 16, 64  # --len_min / --len_max: credo's defaults for the CPU model's short answers


def linear_length_score(length: int, len_min: int, len_max: int) -> float:
    """1 when length <= len_min, falling linearly to 0 at len_max, 0 above (MAESTRO's `len`)."""
    if length <= len_min:
        return 1.0
    if length >= len_max:
        return 0.0
    return (len_max - length) / (len_max - len_min)


class LinearLengthReward:
    """`len` as a --reward_funcs entry (`length_linear`): counts the response's tokens with `tokenizer`, or its
    whitespace-separated words when none is given. MAESTRO counts the generated tokens directly."""

    def __init__(self, len_min: int, len_max: int, tokenizer=None):
        if not 0 <= len_min < len_max:
            raise ValueError(f"need 0 <= len_min < len_max, got {len_min}, {len_max}")
        self.len_min, self.len_max, self.tokenizer = len_min, len_max, tokenizer
        self.name = "length_linear"

    def __call__(self, prompt, completion, sample) -> float:
        n = len(self.tokenizer(completion, add_special_tokens=False)["input_ids"]) if self.tokenizer else len(completion.split())
        return linear_length_score(n, self.len_min, self.len_max)
