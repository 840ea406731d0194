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


def test_a_timed_out_call_does_not_keep_the_process_from_exiting():
    import subprocess
    import sys
    from tests.helpers import REPO_ROOT
    program = ("import time\nfrom rewards.base import RewardCaller\n"
               "caller = RewardCaller(lambda p, c, s: time.sleep(120), 'hangs', timeout_s=0.2)\n"
               "print(caller('p', 'c', {}), caller.stats.timeouts)\n")
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["0.0", "1"], done.stderr
    assert time.monotonic() - start < 20  # the abandoned call's thread is not joined at exit


def test_a_failure_is_kept_as_the_last_error_with_its_cause():
    def broken(prompt, completion, sample):
        raise ConnectionError("reward server unreachable")
    caller = RewardCaller(broken, "judge")
    caller("p", "c", {})
    assert caller.stats.last_error == "raised ConnectionError: reward server unreachable"
    assert caller.stats.failures == 1


def test_a_dict_with_several_bad_components_counts_one_failed_call():
    caller = RewardCaller(lambda p, c, s: {"a": float("nan"), "b": "x", "c": 1.0}, "multi")
    assert caller("p", "c", {}) == {"a": 0.0, "b": 0.0, "c": 1.0}
    assert caller.stats.errors == 1 and caller.stats.calls == 1
