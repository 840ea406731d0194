"""--env toolcall in one short train.py step with DARA's four rewards: the metrics, and completions.jsonl's parse
errors."""
import json
import os

import pytest

from rl.log.loggers import read_metrics
from tests.helpers import run_train_in_process
from tests.train.test_train_deepspeed import assert_ok

pytestmark = pytest.mark.slow


def test_one_dara_step_on_bfcl_logs_each_reward_and_why_a_parse_failed(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    rewards = "tool_format,tool_correct,think_length,length_budget"
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--env", "toolcall",
                                 "--algo", "dara", "--reward_funcs", rewards,
                                 "--length_budget_tokens", "4", "--num_generations", "2",
                                 "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "8",
                                 "--max_prompt_seq_len", "256", "--max_steps", "1", "--no_final_export",
                                 "--save_strategy", "no", "--log_completions", "4"])
    assert_ok(proc)
    (row,) = read_metrics(os.path.join(out, "metrics.jsonl"))
    for name in ("tool_format", "tool_correct", "think_length", "length_budget"):
        assert row[f"reward/{name}/errors"] == 0 and 0.0 <= row[f"reward/{name}/mean"] <= 1.0
    assert {"env/format/mean", "env/correct/mean", "env/info/parsed/mean", "dara/w/tool_format"} <= set(row)
    for name in rewards.split(","):  # DARA's diagnostics (#48 item 6) reach the logged metrics of a real step
        assert {f"dara/{q}/{name}" for q in ("energy", "weighted_energy", "active_groups", "cap_binds")} <= set(row)
    assert "--max_prompt_seq_len 256 cuts longer ones from the left" in proc.stdout + proc.stderr
    with open(os.path.join(out, "completions.jsonl")) as f:
        records = [json.loads(line) for line in f]
    assert len(records) == 4
    for record in records:  # a random model writes no layout: each record says why, with the question's id
        assert record["env"]["parse_error"] and record["env"]["id"] and record["env"]["category"]
        assert record["components"]["tool_format"] == 0.0
