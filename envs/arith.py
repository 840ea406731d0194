"""Synthetic single- and two-digit addition/subtraction: the CPU default task.

Problems are drawn from a seeded generator; the 'eval' split is a fixed set that the 'train' split never
contains, so held-out accuracy measures generalisation, not memorisation.
"""
import random

from envs.base import VerifyAndRefineEnv, register_env
from rewards.arith import ArithVerifier

PROMPT_TEMPLATE = "What is {a} {op} {b}? Give the final answer as \\boxed{{number}}."
EVAL_SEED = 20261130


def _problem(rng: random.Random) -> dict:
    digits = rng.choice((1, 2))
    lo, hi = (0, 9) if digits == 1 else (10, 99)
    a, b = rng.randint(lo, hi), rng.randint(lo, hi)
    op = rng.choice("+-")
    if op == "-" and b > a:
        a, b = b, a  # keep answers non-negative
    answer = a + b if op == "+" else a - b
    return {"a": a, "b": b, "op": op, "answer": answer, "digits": digits,
            "prompt": PROMPT_TEMPLATE.format(a=a, op=op, b=b)}


def make_arith_split(split: str, n: int, seed: int = 0) -> list:
    """`n` problems. 'eval' ignores `seed` (a fixed held-out set); 'train' excludes every eval problem."""
    if split == "eval":
        rng = random.Random(EVAL_SEED)
        return [_problem(rng) for _ in range(n)]
    if split != "train":
        raise ValueError(f"arith split must be 'train' or 'eval', got {split!r}")
    held_out = {(p["a"], p["op"], p["b"]) for p in make_arith_split("eval", 1000)}
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        p = _problem(rng)
        if (p["a"], p["op"], p["b"]) not in held_out:
            rows.append(p)
    return rows


@register_env("arith")
class ArithEnv(VerifyAndRefineEnv):
    """Ask the sum; score 1 when the final integer is right. With max_turns > 1, a wrong answer gets another try."""

    @classmethod
    def make_verifier(cls, **kwargs):
        return ArithVerifier()

    def first_message(self, sample: dict) -> str:
        return sample["prompt"]

    @classmethod
    def dataset(cls, split: str, n: int, seed: int):
        return make_arith_split(split, n, seed)
