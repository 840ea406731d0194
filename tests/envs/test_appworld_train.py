"""`--env appworld` (lite) end to end: training under the real launcher, and eval.py reporting TGC and SGC (its
main() in this process: the same code as `python eval.py`, without a new interpreter's imports)."""
import json
import os

import pytest

from rl.log.loggers import read_metrics
from tests.helpers import run_train
from tests.eval.test_eval_cli import eval_in_process
from tests.train.test_train_deepspeed import assert_ok


@pytest.mark.slow
def test_appworld_lite_trains_end_to_end_with_tcpo_and_its_counterfactuals(tiny_model_dir, tmp_path):
    """A random model writes no Python, so its replies pick their cells through the scripted coder (the task's
    solution or nothing, tests/envs/appworld_scripted.py); every first turn may get counterfactuals (prior none),
    whose alternatives are re-played from the state saved before the turn."""
    out = str(tmp_path)
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--algo", "tcpo",
                      "--env", "tests.envs.appworld_scripted:ScriptedAppWorldEnv", "--tcpo_first_turn_prior", "none",
                      "--max_turns", "2", "--max_steps", "2", "--num_generations", "2",
                      "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "8",
                      "--max_prompt_seq_len", "256", "--no_final_export"], num_ranks=1)
    assert_ok(proc)
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert len(rows) == 2
    for key in ("reward/mean", "avg_turns", "success_by_turn/2", "tcpo/cf_turns", "tcpo/cf_applied"):
        assert rows[-1][key] is not None, key  # a non-finite value is written as null
    assert rows[-1]["reward/correctness/errors"] == 0  # no env step or alternative failed
    assert all(row["tcpo/cf_turns"] > 0 for row in rows)
    # alternatives that differ in score: finite counterfactuals reach TCPO's advantages (0 when AppWorld had none)
    assert sum(row["tcpo/cf_applied"] for row in rows) > 0
    assert 0 < rows[-1]["reward/mean"] <= 1


def test_eval_reports_tgc_and_sgc_on_the_lite_test_split(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "appworld", "--limit", "3",
                            "--max_turns", "2", "--max_new_tokens", "6", "--max_prompt_seq_len", "256",
                            "--output_dir", str(out)], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    metrics = result["metrics"]
    for key in ("appworld/tgc", "appworld/sgc", "appworld/avg_pass_rate", "appworld/tgc/difficulty_1",
                "appworld/sgc/difficulty_1"):
        assert key in metrics, key
    assert metrics["appworld/tgc"] == metrics["pass@1"] == 0.0  # a random model solves nothing
    assert 0 < metrics["appworld/avg_pass_rate"] < 1
    episodes = [e for p in result["problems"] for e in p["episodes"]]
    assert [e["task_id"] for e in episodes] == ["messages_text_relationship_1", "messages_text_relationship_2",
                                                    "messages_text_relationship_3"]
    assert "| appworld/tgc |" in proc.stdout
