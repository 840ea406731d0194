"""experiments/mechanisms/maestro_shape.py: at equal batch-rank levels, GRPO's std scaling makes MAESTRO's meta-reward
favour a reward with a tied block at its top and disfavour one with a tied block at its bottom (issue 42); without
the std division (--scale_rewards none, the centred meta-reward) neither shape is favoured. About 5 s on one thread."""
from experiments.mechanisms import maestro_shape
from tests.experiments.test_mechanisms import one_thread  # noqa: F401 (the module's autouse fixture: tiny tensors, one thread)

BATCHES = 1000


def test_under_std_scaling_a_tied_top_is_favoured_and_a_tied_bottom_disfavoured_at_equal_levels():
    """Recorded on seeds 0-2 (1000 batches each): rare -0.043 / -0.016 / -0.040, ceiling +0.035 / +0.040 / +0.022,
    SE 0.009 each (4.6 and 3.9 SE on seed 0). Beyond 2 SE on a fresh seed with probability about 0.9 each; the sign
    flips with probability about 1e-4 (rare) and 2e-4 (ceiling). Without the std division seed 0 gives -1.1 and
    +0.9 SE, so the assertions fail if the scaling no longer shapes the signal."""
    rare = maestro_shape.start_signal("rare", "group", batches=BATCHES)
    ceiling = maestro_shape.start_signal("ceiling", "group", batches=BATCHES)
    assert rare["mean"] < -2 * rare["se"] and ceiling["mean"] > 2 * ceiling["se"], (rare, ceiling)


def test_without_the_std_division_no_shape_is_favoured():
    """The level formula is exact there and every level is 0.5: the signal is 0 up to the estimator's noise."""
    for shape in ("rare", "ceiling"):
        s = maestro_shape.start_signal(shape, "none", batches=BATCHES)
        assert abs(s["mean"]) < 3 * s["se"], (shape, s)
