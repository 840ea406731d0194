"""Benchmark rewards, loaded by dotted path (`--reward_funcs correctness,benchmarks.extra_rewards:concise_answer`).

Not named rewards.py: a script run as `python benchmarks/<name>.py` has benchmarks/ first on its path, where a
rewards.py would hide the rewards package.
"""
import re

from rewards.arith import extract_final_number
from rewards.length import reasoning_part

CONCISE_WORDS = 4


def concise_answer(prompt, completion, sample):
    """1 when a response that commits to a number has at most CONCISE_WORDS words before its final answer, 0 when
    it has more, and None (abstain) when it commits to no number at all.

    Why not the plain `length` reward: with it, SmolLM2 learned within 10 steps to answer every prompt with the
    literal text `\\boxed{number}` copied from the instruction (0 words, length reward 1, correctness 0), under
    GRPO and GDPO alike (experiments/results/multireward_hackable_length.md). Abstaining on answer-less responses
    removes that shortcut while keeping a length signal that most responses fail at first.
    """
    if extract_final_number(completion) is None:
        return None
    return 1.0 if len(reasoning_part(completion).split()) <= CONCISE_WORDS else 0.0


def graded_correctness(prompt, completion, sample):
    """1 / (1 + |prediction - answer|) for the response's final integer (rewards.arith's extraction), 0 without one.

    The dense reward of the DARA test (issue #20 item 3): a near miss still scores, so the reward has spread in
    almost every group, unlike binary correctness, which SmolLM2 meets in 10-40% of groups.
    """
    predicted = extract_final_number(completion)
    if predicted is None:
        return 0.0
    return 1.0 / (1.0 + abs(predicted - int(sample["answer"])))


_ENDS_WITH_BOXED = re.compile(r"\\boxed\{\s*-?\d+\s*\}\.?\s*$")


def ends_with_boxed(prompt, completion, sample):
    """1 when the response ends with its `\\boxed{N}` answer (an integer N, optionally a full stop), else 0.

    The sparse reward of the DARA test (issue #20 item 3): stop right after the answer. The issue's example, a
    final line `Answer: N`, was met by 0 of 64 base-model samples (the prompt asks for \\boxed{}), so it could not
    be the 2-10% reward the test needs; this one was met by 5 of those 64 and its base rate is re-measured on an
    independent sample in experiments/results/dara_vs_gdpo.md. It is compatible with correctness: the boxed number
    is the one the verifier reads.
    """
    return float(_ENDS_WITH_BOXED.search(completion) is not None)
