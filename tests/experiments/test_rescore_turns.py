"""experiments/rescore_turns.py: a recorded turn re-scored with the env's current verifier."""
import json

from experiments import rescore_turns


def test_rescore_reads_the_chosen_turn_of_every_sample_with_the_current_verifier(tmp_path, capsys):
    problems = [{"answer": [5, 3, 7], "responses": [["(1) 3 + 2 = 5\n(2) 2 + 1 = 3\n(3) 2 + 5 = 7", "no answer"],
                                                    ["\\boxed{5} \\boxed{4} \\boxed{0}"]]},
                {"answer": [1, 1, 1], "responses": [["1 + 0 = 1", "\\boxed{1} \\boxed{1} \\boxed{1}"]]}]
    assert rescore_turns.rescore(problems, "arith_multi", 1) == [1.0, 1 / 3, 1 / 3]
    assert rescore_turns.rescore(problems, "arith_multi", 2) == [0.0, 1.0]  # a sample without turn 2 is left out
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"problems": problems}))
    rescore_turns.main([str(path), "--env", "arith_multi", "--turn", "1"])
    assert "3 turn-1 responses; parts right: 0: 0, 1: 2, 2: 0, 3: 1; mean score 0.5556" in capsys.readouterr().out
