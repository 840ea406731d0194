"""Multi-part arithmetic with graded turn scores: three sums in one prompt, score = fraction right.

With binary scores a refinement turn can only fail, solve or break a solution; with three parts it can also make
partial progress (1/3 -> 2/3), lose some (2/3 -> 1/3) or trade one part for another, which is what TCPO's
improvement and regression credit and MT-GRPO's turn advantages are about.
"""
import random

from envs.arith import OwnRowFields, _problem, held_out_split
from envs.base import VerifyAndRefineEnv, register_env
from rewards.arith_multi import MultiSumVerifier, parts_correct

NUM_PARTS = 3
EVAL_SEED = 20261201


def _multi_problem(rng: random.Random) -> dict:
    parts = [_problem(rng) for _ in range(NUM_PARTS)]
    listed = ", ".join(f"({j + 1}) {p['a']} {p['op']} {p['b']}" for j, p in enumerate(parts))
    prompt = (f"Compute each of these: {listed}. Give the {NUM_PARTS} final answers in order, each as "
              "\\boxed{number}.")
    return {"parts": [{k: p[k] for k in ("a", "op", "b", "answer")} for p in parts],
            "answer": [p["answer"] for p in parts], "prompt": prompt}


def _key(row: dict) -> tuple:
    return tuple((p["a"], p["op"], p["b"]) for p in row["parts"])


def make_multi_split(split: str, n: int, seed: int = 0) -> list:
    """`n` problems. 'eval' ignores `seed` (a fixed held-out set); 'train' never contains an eval problem."""
    return held_out_split("arith_multi", _multi_problem, _key, EVAL_SEED, split, n, seed)


@register_env("arith_multi")
class ArithMultiEnv(OwnRowFields, VerifyAndRefineEnv):
    """Three sums per prompt; a turn's score is the fraction answered right (0, 1/3, 2/3 or 1). The feedback says
    how many parts are right, never which answers are expected."""

    @classmethod
    def make_verifier(cls, **kwargs):
        return MultiSumVerifier()

    def first_message(self, sample: dict) -> str:
        return sample["prompt"]

    def verdict(self, model_text: str) -> tuple:
        right = parts_correct(model_text, self.sample["answer"])
        return sum(right) / len(right), sum(right)

    def retry_feedback(self, score: float, detail) -> str:
        total = len(self.sample["answer"])
        return f"{detail} of the {total} answers are correct. Check your work and try again."

    @classmethod
    def dataset(cls, split: str, n: int, seed: int):
        return make_multi_split(split, n, seed)
