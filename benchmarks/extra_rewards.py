"""Benchmark rewards, loaded by dotted path (`--reward_funcs correctness,benchmarks.extra_rewards:concise_answer`).

Not named rewards.py: a script run as `python benchmarks/<name>.py` has benchmarks/ first on its path, where a
rewards.py would hide the rewards package.
"""
from rewards.arith import extract_final_number
from rewards.length import reasoning_part

CONCISE_WORDS = 4


def concise_answer(prompt, completion, sample):
    """1 when a response that commits to a number has at most CONCISE_WORDS words before its final answer, 0 when
    it has more, and None (abstain) when it commits to no number at all.

    Why not the plain `length` reward: with it, SmolLM2 learned within 10 steps to answer every prompt with the
    literal text `\\boxed{number}` copied from the instruction (0 words, length reward 1, correctness 0), under
    GRPO and GDPO alike (benchmarks/results/multireward_hackable_length.md). Abstaining on answer-less responses
    removes that shortcut while keeping a length signal that most responses fail at first.
    """
    if extract_final_number(completion) is None:
        return None
    return 1.0 if len(reasoning_part(completion).split()) <= CONCISE_WORDS else 0.0
