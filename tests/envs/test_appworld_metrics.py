"""TGC, SGC, per difficulty and average pass rate on hand-made results (envs.appworld.metrics.appworld_metrics)."""
import pytest

from envs.appworld.metrics import appworld_metrics


def rec(task_id, difficulty, passed, total, sample=0):
    return {"task_id": task_id, "difficulty": difficulty, "success": passed == total, "pass_count": passed,
            "num_tests": total, "sample": sample}


def test_tgc_sgc_and_pass_rate_match_hand_computation():
    records = [rec("aaa_1", 1, 2, 2), rec("aaa_2", 1, 3, 3), rec("aaa_3", 1, 2, 2),     # scenario aaa: solved
               rec("bbb_1", 2, 4, 4), rec("bbb_2", 2, 1, 4), rec("bbb_3", 2, 4, 4),     # bbb: one task fails
               rec("ccc_1", 3, 0, 5), rec("ccc_2", 3, 5, 5), rec("ccc_3", 3, 5, 5)]     # ccc: one task fails
    m = appworld_metrics(records)
    assert m["appworld/tgc"] == pytest.approx(7 / 9)          # 7 of 9 tasks pass every check
    assert m["appworld/sgc"] == pytest.approx(1 / 3)          # only aaa has all three tasks passing
    assert m["appworld/avg_pass_rate"] == pytest.approx((1 + 1 + 1 + 1 + 0.25 + 1 + 0 + 1 + 1) / 9)
    assert m["appworld/tgc/difficulty_1"] == 1.0
    assert m["appworld/tgc/difficulty_2"] == pytest.approx(2 / 3)
    assert m["appworld/tgc/difficulty_3"] == pytest.approx(2 / 3)
    assert (m["appworld/sgc/difficulty_1"], m["appworld/sgc/difficulty_2"], m["appworld/sgc/difficulty_3"]) == (1, 0, 0)


def test_with_several_samples_a_scenario_counts_once_per_sample():
    records = [rec("aaa_1", 1, 1, 1, 0), rec("aaa_2", 1, 1, 1, 0),    # sample 0: aaa solved
               rec("aaa_1", 1, 1, 1, 1), rec("aaa_2", 1, 0, 1, 1)]    # sample 1: not
    m = appworld_metrics(records)
    assert m["appworld/tgc"] == 0.75 and m["appworld/sgc"] == 0.5


def test_underscores_in_the_scenario_name_and_no_records():
    m = appworld_metrics([rec("music_liked_genre_1", 1, 1, 1), rec("music_liked_genre_2", 1, 1, 2)])
    assert m["appworld/sgc"] == 0.0 and m["appworld/tgc"] == 0.5
    assert appworld_metrics([]) == {}
