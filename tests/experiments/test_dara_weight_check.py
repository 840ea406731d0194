"""experiments/dara_weight_check.py: DARA's weights move only where both rewards are active in different numbers of
groups, and the check counts exactly those steps."""
from experiments.dara_weight_check import weight_moves

BOTH_CONSTANT = [(1.0, 0.0)] * 4                               # format always right, never a right call
FORMAT_SPREAD = [(1.0, 0.0), (0.0, 0.0), (1.0, 0.0), (1.0, 0.0)]
BOTH_SPREAD = [(1.0, 1.0), (0.0, 0.0), (1.0, 0.0), (1.0, 0.0)]


def test_no_step_moves_a_weight_when_one_reward_is_never_active():
    assert weight_moves([BOTH_CONSTANT, FORMAT_SPREAD], prompts=4, steps=50)["any"] == 0.0


def test_a_step_with_the_sparser_reward_active_up_weights_it():
    # both active in every group: equal densities, no weight moves
    assert weight_moves([BOTH_SPREAD], prompts=3, steps=20)["any"] == 0.0
    # format active in every group, correctness only in the BOTH_SPREAD ones: correctness is up-weighted whenever a step
    # draws both kinds, which 8 draws from two kinds almost always do
    moved = weight_moves([FORMAT_SPREAD, BOTH_SPREAD], prompts=8, steps=200)
    assert moved["tool_format"] == 0.0 and 0.9 < moved["tool_correct"] == moved["any"] <= 1.0


def test_a_file_without_sampled_groups_is_refused_by_name(tmp_path):
    import json

    import pytest

    from experiments.dara_weight_check import main
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"problems": [{"id": 1, "episodes": [{"format": 1, "correct": 0}]}]}))  # greedy: n = 1
    with pytest.raises(SystemExit, match="no groups of 2 or more responses"):
        main([str(path)])
