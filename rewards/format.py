"""Format reward: 1 when the response gives its final answer in the required form, else 0."""
import re

FORMATS = {
    # the answer inside \boxed{...} (math convention)
    "boxed": re.compile(r"\\boxed\{[^{}]+\}"),
    # <think>...</think> followed by <answer>...</answer> (R1 convention)
    "tags": re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL),
}


class FormatReward:
    """`style` is a FORMATS key or a regular expression of your own (searched, DOTALL)."""

    def __init__(self, style: str = "boxed"):
        self.pattern = FORMATS.get(style) or re.compile(style, re.DOTALL)
        self.name = "format"

    def __call__(self, prompt, completion, sample) -> float:
        return 1.0 if self.pattern.search(completion) else 0.0
