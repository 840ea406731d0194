"""experiments/same_steps.py's comparison: clocks aside, equal metrics are "same" and the first difference is named."""
from experiments.same_steps import first_difference


def test_the_clocks_are_ignored_and_nan_equals_nan():
    before = [{"step": 1, "train/reward": 0.5, "time/step": 3.0, "throughput/tokens_per_s": 9.0, "kl": float("nan")}]
    after = [{"step": 1, "train/reward": 0.5, "time/step": 4.2, "throughput/tokens_per_s": 7.0, "kl": float("nan")}]
    assert first_difference(before, after) is None


def test_the_first_changed_metric_is_named_with_both_values():
    before = [{"step": 1, "a": 1.0}, {"step": 2, "a": 2.0, "b": 1.0}]
    after = [{"step": 1, "a": 1.0}, {"step": 2, "a": 2.0, "b": 1.5}]
    assert first_difference(before, after) == "step 2: b 1.0 -> 1.5"
    assert first_difference(before, after[:1]) == "2 logged steps before, 1 after"


def test_a_name_that_is_no_commit_is_refused_before_any_run():
    import pytest

    from experiments.same_steps import main
    with pytest.raises(SystemExit, match="'no-such-commit' is not a commit"):
        main(["no-such-commit", "HEAD"])
