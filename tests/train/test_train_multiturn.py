"""Multi-turn verify-and-refine training: TCPO, MT-GRPO and trajectory GRPO. TCPO runs under the real launcher on 2
ranks and MT-GRPO on 1; the other behaviours run train.py's main() in the test process (run_train_in_process: the
same DeepSpeed engine, without the launcher's or an interpreter's start-ups)."""
import os

import pytest

from rl.log.loggers import read_metrics
from tests.helpers import REPO_ROOT, run_train, run_train_in_process
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok

pytestmark = pytest.mark.slow
MATH500 = os.path.join(REPO_ROOT, "data", "math500", "test.jsonl")


def test_tcpo_on_math_runs_on_two_ranks(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--algo", "tcpo", "--env", "math",
                      "--data_path", MATH500, "--max_turns", "3", "--max_steps", "2", "--num_generations", "2",
                      "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "8", "--no_final_export"],
                     num_ranks=2)
    assert_ok(proc)
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert len(rows) == 2
    assert rows[-1]["avg_turns"] == 3.0  # a random model never solves MATH: every episode uses all its turns
    assert rows[-1]["success_by_turn/3"] == 0.0


@pytest.mark.parametrize("algo", ["tcpo", "mt_grpo", "grpo"])
def test_turn_level_and_trajectory_methods_on_a_dense_multi_turn_env(algo, tiny_model_dir, tmp_path):
    out = str(tmp_path)
    args = ["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--algo", algo, "--max_turns", "3",
            "--max_steps", "2", "--no_final_export", "--tcpo_cf_budget", "3", *TINY_RUN]
    proc = run_train(args, num_ranks=1) if algo == "mt_grpo" else run_train_in_process(args)
    assert_ok(proc)
    last = read_metrics(os.path.join(out, "metrics.jsonl"))[-1]
    for key in ("success_by_turn/1", "success_by_turn/3", "avg_turns", "advantage/std"):
        assert key in last and last[key] is not None, key  # a non-finite value is written as null
    assert last["advantage/std"] > 0  # dense turn scores give non-zero credit
    if algo == "tcpo":
        for part in ("imp", "pres", "reg", "hind", "cf"):
            assert f"tcpo/{part}" in last
        assert last["tcpo/cf_turns"] == 3.0
        assert 0 < last["time_share/counterfactual"] < 1


def test_ranks_stay_in_lockstep_when_one_rank_finishes_its_episodes_early(tiny_model_dir, tmp_path):
    """ZeRO-3 gathers parameters collectively for every generate: rank 0 (all solved at turn 1, no counterfactual
    candidates) must keep joining rank 1's later turns and counterfactual sampling instead of hanging the run."""
    out = str(tmp_path)
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--algo", "tcpo",
                      "--env", "tests.fixture_envs:RankZeroSolvesEnv", "--max_turns", "3", "--episode_end", "success",
                      "--max_steps", "1",
                      "--num_generations", "2", "--per_device_generation_batch_size", "1", "--max_answer_seq_len",
                      "4", "--no_final_export", "--tcpo_cf_budget", "2", "--tcpo_cf_samples", "2"],
                     num_ranks=2, timeout=300)
    assert_ok(proc)
    row = read_metrics(os.path.join(out, "metrics.jsonl"))[-1]
    assert row["success_by_turn/1"] == 0.5 and row["avg_turns"] == 2.0  # rank 0: 1 turn each, rank 1: 3 turns each


def test_tcpo_on_arith_with_episode_end_max_turns_plays_every_episode_to_the_last_turn(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--algo", "tcpo", "--env",
                                 "arith", "--max_turns", "3", "--episode_end", "max_turns", "--max_steps", "1",
                                 "--num_generations", "2", "--per_device_generation_batch_size", "2",
                                 "--max_answer_seq_len", "6", "--tcpo_cf_budget", "0", "--no_final_export"])
    assert_ok(proc)
    row = read_metrics(os.path.join(out, "metrics.jsonl"))[-1]
    assert row["avg_turns"] == 3.0
    for key in ("preservation_rate", "regression_rate", "best_turn_success", "final_turn_success",
                "success_by_turn/3", "tcpo/pres", "tcpo/reg", "tcpo/pres_frac", "tcpo/reg_frac"):
        assert key in row, key


def test_preservation_and_regression_are_logged_when_later_turns_keep_or_break_a_solution(tiny_model_dir, tmp_path):
    """Every turn 1 is solved (FirstTurnSolvedEnv), so under the tcpo default (max_turns) turns 2 and 3 each keep or
    break it: the rates are measured and TCPO's preservation bonus and regression penalty both fire."""
    out = str(tmp_path)
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--algo", "tcpo", "--env",
                                 "tests.fixture_envs:FirstTurnSolvedEnv", "--max_turns", "3", "--max_steps", "1",
                                 "--num_generations", "4", "--per_device_generation_batch_size", "2",
                                 "--max_answer_seq_len", "8", "--temperature", "1.0", "--tcpo_cf_budget", "0",
                                 "--no_final_export"])
    assert_ok(proc)
    row = read_metrics(os.path.join(out, "metrics.jsonl"))[-1]
    assert row["avg_turns"] == 3.0 and row["success_by_turn/1"] == 1.0 and row["best_turn_success"] == 1.0
    assert row["preservation_rate"] + row["regression_rate"] == pytest.approx(1.0)
    assert 0 < row["regression_rate"] < 1
    assert row["tcpo/pres"] > 0 > row["tcpo/reg"]
