"""Verifiers and reward functions. A reward function is fn(prompt, completion, sample) -> float | dict.

Calls go through rewards.base.RewardCaller, which times out, counts errors and scores failures 0.
"""
from rewards.base import RewardCaller, RewardStats
from rewards.arith import ArithVerifier, extract_final_number
from rewards.math import MathVerifier

__all__ = ["RewardCaller", "RewardStats", "ArithVerifier", "extract_final_number", "MathVerifier"]
