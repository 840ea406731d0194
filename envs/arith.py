"""Synthetic single- and two-digit addition/subtraction: the CPU default task.

Problems are drawn from a seeded generator; the 'eval' split is a fixed set that the 'train' split never
contains, so held-out accuracy measures generalisation, not memorisation.

The two splits share the problem space by a fixed partition (half the problems of each size are eval problems),
not by excluding the eval split's first rows from training: there are only 155 single-digit problems, and the
first 1000 eval rows held out 142 of them, so the train split had been 93% two-digit while the eval split is half
single-digit (benchmarks/results/main_job.md, issue #41).
"""
import random
import zlib

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


def is_eval_problem(key) -> bool:
    """The fixed half of the problem space that only the eval split draws from (a stable hash, not Python's)."""
    return zlib.crc32(repr(key).encode()) % 2 == 0


def partitioned_split(name: str, draw, key, eval_seed: int, split: str, n: int, seed: int) -> list:
    """`n` rows from `draw(rng)` kept to one side of `is_eval_problem(key(row))`: each split keeps the generator's
    mix (e.g. of problem sizes) and no eval problem of any `n` is ever a train problem. 'eval' ignores `seed`."""
    if split not in ("train", "eval"):
        raise ValueError(f"{name} split must be 'train' or 'eval', got {split!r}")
    want_eval = split == "eval"
    rng = random.Random(eval_seed if want_eval else seed)
    rows = []
    while len(rows) < n:
        row = draw(rng)
        if is_eval_problem(key(row)) == want_eval:
            rows.append(row)
    return rows


def arith_target(row: dict) -> str:
    """A warm start's reply (credo's reading): the sum written out once, then the boxed answer the prompt asks for."""
    return f"{row['a']} {row['op']} {row['b']} = {row['answer']}. The answer is \\boxed{{{row['answer']}}}."


def arith_key(problem: dict) -> tuple:
    return problem["a"], problem["op"], problem["b"]


def make_arith_split(split: str, n: int, seed: int = 0) -> list:
    """`n` problems, half single-digit in both splits. 'eval' ignores `seed` (a fixed held-out set); 'train' never
    contains an eval problem, whatever the eval's size."""
    return partitioned_split("arith", _problem, arith_key, EVAL_SEED, split, n, seed)


class OwnRowFields:
    """For an env that reads its rows by fixed fields, `prompt` and `answer` (its own rows', and a --data_path row's):
    --prompt_key / --answer_key name no field it reads, so they are refused where the flags are parsed
    (rl/rollout/data.py's validate_data_keys, which names --env math for a user's own question/answer rows)."""
    default_prompt_key, default_answer_key = "prompt", "answer"

    @classmethod
    def data_keys(cls, prompt_key: str, answer_key: str) -> tuple:
        return ("prompt", "answer")


@register_env("arith")
class ArithEnv(OwnRowFields, VerifyAndRefineEnv):
    """Ask the sum; score 1 when the final integer is right. With max_turns > 1, a wrong answer gets another try."""

    @classmethod
    def make_verifier(cls, **kwargs):
        return ArithVerifier()

    def first_message(self, sample: dict) -> str:
        return sample["prompt"]

    def sft_target(self, row: dict) -> str:
        return arith_target(row)

    @classmethod
    def dataset(cls, split: str, n: int, seed: int):
        return make_arith_split(split, n, seed)
