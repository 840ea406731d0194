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


def held_out_split(name: str, draw, key, eval_seed: int, split: str, n: int, seed: int) -> list:
    """`n` rows from `draw(rng)`. 'eval' ignores `seed` (a fixed held-out set drawn from `eval_seed`); 'train'
    excludes every problem (by `key(row)`) of the first 1000 eval rows. `name` is the env's, for the error."""
    if split == "eval":
        rng = random.Random(eval_seed)
        return [draw(rng) for _ in range(n)]
    if split != "train":
        raise ValueError(f"{name} split must be 'train' or 'eval', got {split!r}")
    held_out = {key(row) for row in held_out_split(name, draw, key, eval_seed, "eval", 1000, seed)}
    rng = random.Random(seed)
    rows = []
    while len(rows) < n:
        row = draw(rng)
        if key(row) not in held_out:
            rows.append(row)
    return rows


def make_arith_split(split: str, n: int, seed: int = 0) -> list:
    """`n` problems. 'eval' ignores `seed` (a fixed held-out set); 'train' excludes every eval problem."""
    return held_out_split("arith", _problem, lambda p: (p["a"], p["op"], p["b"]), EVAL_SEED, split, n, seed)


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
