"""A task mix where the best reward trade-off differs by prompt (MAESTRO's CPU task): half single-turn arithmetic,
half a short free-form description that ends with a one-word answer.

- arith rows: "What is 7 + 5? ... \\boxed{number}". A terse response is best (the `len` reward agrees with
  correctness) and the reference answer's likelihood after the reasoning (`ppl`) is sharp.
- describe rows: "Describe a quiet river in one short sentence, then give the noun as \\boxed{river}."
  The answer is given away, so `ppl` barely separates responses, while the description's length and the
  policy's entropy do: a Conductor that reads the prompt can emphasise different rewards for the two kinds.

Both kinds are scored by a verifier (the number, or the boxed word), so success is still measured.
"""
import random
import re
import zlib

from envs.arith import EVAL_SEED, OwnRowFields, arith_target, make_arith_split
from envs.base import SUCCESS_THRESHOLD, VerifyAndRefineEnv, register_env
from rewards.arith import ArithVerifier

ADJECTIVES = ["quiet", "busy", "tiny", "bright", "small", "cold", "tall", "green", "noisy", "gentle", "dark", "warm"]
TRAIN_NOUNS = ["river", "city", "forest", "house", "garden", "market", "bridge", "window", "road", "field", "tower",
               "lake", "train", "kitchen", "library", "mountain"]
EVAL_NOUNS = ["harbor", "desert", "castle", "meadow", "station", "island"]  # never seen in training
DESCRIBE_TEMPLATE = "Describe a {adj} {noun} in one short sentence, then give the noun as \\boxed{{{noun}}}."
_BOXED = re.compile(r"\\boxed\{\s*([^{}]*?)\s*\}")
# A warm start's describe replies (credo's reading): one short sentence in a few shapes, so that the warm-started
# policy's length and entropy still vary between responses for MAESTRO's `len` and `ent` to separate.
DESCRIBE_REPLIES = ("The {adj} {noun} sits still under a pale sky.", "A {adj} {noun} is all I can see from here.",
                    "Near the town there is a {adj} {noun} that people like to visit on quiet afternoons.",
                    "This {noun} looks {adj}.")
_DESCRIBE = re.compile(r"Describe an? (\w+) (\w+) in one short sentence")


class MixedVerifier:
    """Arithmetic rows: the final integer; describe rows: the last boxed word equals the noun (case-insensitive)."""
    name = "correctness"

    def __init__(self):
        self.arith = ArithVerifier()

    def __call__(self, prompt, completion, sample) -> float:
        if sample.get("kind") == "describe":
            boxed = _BOXED.findall(completion)
            return float(bool(boxed) and boxed[-1].strip().lower() == str(sample["answer"]).lower())
        return self.arith(prompt, completion, sample)


def make_mixed_split(split: str, n: int, seed: int = 0) -> list:
    """n rows alternating arithmetic and describe prompts; the eval split's problems and nouns are held out."""
    arith = [dict(row, kind="arith") for row in make_arith_split(split, (n + 1) // 2, seed)]
    rng = random.Random(seed if split == "train" else EVAL_SEED)
    nouns = TRAIN_NOUNS if split == "train" else EVAL_NOUNS
    describe = []
    for _ in range(n // 2):
        adj, noun = rng.choice(ADJECTIVES), rng.choice(nouns)
        describe.append({"kind": "describe", "prompt": DESCRIBE_TEMPLATE.format(adj=adj, noun=noun), "answer": noun})
    rows = [row for pair in zip(arith, describe) for row in pair] + arith[len(describe):]
    return rows[:n]


@register_env("mixed")
class MixedEnv(OwnRowFields, VerifyAndRefineEnv):
    @classmethod
    def make_verifier(cls, **kwargs):
        return MixedVerifier()

    def first_message(self, sample: dict) -> str:
        return sample["prompt"]

    def sft_target(self, row: dict) -> str:
        if row.get("kind") != "describe":
            return arith_target(row)
        adj, noun = _DESCRIBE.match(row["prompt"]).groups()
        shape = DESCRIBE_REPLIES[zlib.crc32(row["prompt"].encode()) % len(DESCRIBE_REPLIES)]
        return f"{shape.format(adj=adj, noun=noun)} \\boxed{{{row['answer']}}}"

    def step(self, model_text: str):
        result = super().step(model_text)
        self.final_score = result.score
        return result

    def episode_record(self) -> dict:
        """The prompt kind and the last turn's score, for eval.py's per-kind accuracy (MAESTRO's claim is per kind)."""
        return {"kind": self.sample.get("kind"), "final_score": getattr(self, "final_score", 0.0)}

    @classmethod
    def eval_metrics(cls, records: list) -> dict:
        """`pass@1/<kind>`: the share of a kind's episodes whose last turn is correct (every sample of every row)."""
        by_kind = {}
        for r in records:
            by_kind.setdefault(r["kind"], []).append(float(r["final_score"] >= SUCCESS_THRESHOLD))
        return {f"pass@1/{kind}": sum(v) / len(v) for kind, v in sorted(by_kind.items())}

    @classmethod
    def dataset(cls, split: str, n: int, seed: int):
        return make_mixed_split(split, n, seed)
