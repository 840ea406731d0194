"""Single-digit arithmetic for the throughput benchmarks: credo's arith env (same prompt text, verifier and
verify-and-refine turns), restricted to one-digit operands so that TRL and credo see the same kind of prompts.

credo trains on it with `--env benchmarks.bench_envs:SingleDigitArithEnv`; the TRL runner builds its dataset from
`single_digit_rows`. There is no held-out split: this is for timing, not accuracy (the arith eval split covers
almost every single-digit problem, so excluding it as `envs.arith` does would leave nothing to train on).
"""
import random

from envs.arith import PROMPT_TEMPLATE, ArithEnv


def single_digit_rows(n: int, seed: int) -> list:
    """`n` rows {a, b, op, answer, digits, prompt}, operands 0..9, answers non-negative, seeded."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b, op = rng.randint(0, 9), rng.randint(0, 9), rng.choice("+-")
        if op == "-" and b > a:
            a, b = b, a
        answer = a + b if op == "+" else a - b
        rows.append({"a": a, "b": b, "op": op, "answer": answer, "digits": 1,
                     "prompt": PROMPT_TEMPLATE.format(a=a, op=op, b=b)})
    return rows


class SingleDigitArithEnv(ArithEnv):
    """ArithEnv whose data are single-digit problems (both splits draw from the same generator)."""

    @classmethod
    def dataset(cls, split: str, n: int, seed: int):
        return single_digit_rows(n, seed if split == "train" else seed + 1)
