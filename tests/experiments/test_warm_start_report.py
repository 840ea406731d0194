"""experiments/warm_start_report.py: the shares of groups where a reward is active, the target and the pick."""
import json

from experiments import warm_start_report as report


def toolcall_results(groups):
    """groups: per question, the (format, correct) of each of its sampled responses."""
    return {"problems": [{"episodes": [{"format": f, "correct": c} for f, c in g]} for g in groups]}


def test_group_shares_count_where_the_sparse_reward_is_non_zero_and_where_it_has_spread():
    s = report.summarise(toolcall_results([[(1, 1)] * 4, [(1, 0), (1, 1), (0, 0), (1, 0)], [(1, 0)] * 4]), "toolcall")
    assert s["format"] == 11 / 12 and s["correct"] == 5 / 12
    assert s["groups_with_correct"] == 2 / 3 and s["groups_correct_spread"] == 1 / 3
    assert s["groups_format_spread"] == 1 / 3


def test_mixed_format_is_the_boxed_answer_of_the_last_turn():
    results = {"problems": [{"correct_by_turn": [[1], [0]], "responses": [["so \\boxed{4}"], ["four"]]}]}
    assert report.summarise(results, "mixed")["format"] == 0.5


def test_the_target_needs_the_band_and_for_toolcall_a_third_of_groups_with_a_correct_response():
    assert report.meets("mixed", {"format": 0.72})
    assert not report.meets("mixed", {"format": 0.97})
    assert not report.meets("toolcall", {"format": 0.81, "groups_with_correct": 0.23})
    assert report.meets("toolcall_fine", {"format": 0.81, "groups_with_correct": 0.34})
    assert report.shortfall("toolcall", {"format": 0.81, "groups_with_correct": 0.233}) == 1 / 3 - 0.233


def test_the_pick_is_the_shortest_export_meeting_the_target_over_every_run_of_the_env(tmp_path):
    def write(env, name, fmt):
        folder = tmp_path / env / "eval" / f"{name}_sampled"
        folder.mkdir(parents=True)
        problems = [{"correct_by_turn": [[1]] * 4, "responses": [["\\boxed{1}"]] * round(4 * fmt)
                     + [["no"]] * (4 - round(4 * fmt))}] * 10
        (folder / "results.json").write_text(json.dumps({"problems": problems}))
    write("mixed", "step_8", 1.0)
    write("mixed_fine", "step_6", 0.75)
    write("mixed_fine", "step_2", 0.25)
    text = report.report(str(tmp_path))
    assert "- mixed: **step_6 (mixed_fine)**" in text
