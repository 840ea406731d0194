"""experiments/kind_separation.py's per-seed top reward and collapse verdict (issue #42: the issue-19 sweep's Conductor
put pi 0.999 on `len` for both prompt kinds)."""
from experiments import kind_separation


def _rows(arith_len, describe_len):
    return [{"conductor/pi/arith/fmt": 1 - arith_len, "conductor/pi/arith/len": arith_len,
             "conductor/pi/describe/fmt": 1 - describe_len, "conductor/pi/describe/len": describe_len}] * 3


def test_a_seed_collapses_only_when_one_reward_has_pi_above_the_bar_on_both_kinds():
    runs = [("conductor", 1, _rows(0.999, 0.995)), ("conductor", 2, _rows(0.999, 0.2)),
            ("conductor", 3, _rows(0.98, 0.999))]
    top = kind_separation.separation(runs, ("arith", "describe"), last=2)["top"]
    assert [t["collapsed"] for t in top] == [True, False, False]
    assert top[1]["kinds"][0][0] == "len" and top[1]["kinds"][1][0] == "fmt"
