import math
import time

from rewards.base import RewardCaller


def test_exception_is_counted_and_scored_zero():
    def broken(prompt, completion, sample):
        raise RuntimeError("verifier bug")
    caller = RewardCaller(broken, "broken")
    assert caller("p", "c", {}) == 0.0
    assert caller.stats.errors == 1 and caller.stats.calls == 1


def test_timeout_is_counted_and_scored_zero_and_the_next_call_works():
    def slow(prompt, completion, sample):
        if completion == "hang":
            time.sleep(5)
        return 1.0
    caller = RewardCaller(slow, "slow", timeout_s=0.2)
    start = time.perf_counter()
    assert caller("p", "hang", {}) == 0.0
    assert time.perf_counter() - start < 2.0
    assert caller.stats.timeouts == 1
    assert caller("p", "fine", {}) == 1.0


def test_non_finite_and_non_numeric_results_score_zero():
    caller = RewardCaller(lambda p, c, s: s["value"], "echo")
    assert caller("p", "c", {"value": float("nan")}) == 0.0
    assert caller("p", "c", {"value": "high"}) == 0.0
    assert caller.stats.errors == 2


def test_none_is_an_abstention_kept_as_nan():
    caller = RewardCaller(lambda p, c, s: {"format": 1.0, "judge": None}, "multi")
    out = caller("p", "c", {})
    assert out["format"] == 1.0 and math.isnan(out["judge"])
    assert caller.stats.errors == 0
