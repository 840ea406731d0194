"""MAESTRO end to end: the Conductor's metrics and its meta-update under the real launcher on 2 ranks; exact resume,
the paper's baselines and the reward model through train.py's main() in the test process (the same DeepSpeed
engine: run_train_in_process)."""
import math
import os

import pytest
import torch

from rl.log.loggers import read_metrics
from tests.helpers import build_tiny_reward_model, run_train_in_process
from tests.train.test_train_deepspeed import assert_ok

pytestmark = pytest.mark.slow
RUN = ["--algo", "maestro", "--env", "mixed", "--num_generations", "4", "--per_device_generation_batch_size", "2",
       "--max_answer_seq_len", "12", "--temperature", "1.0", "--actor_learning_rate", "1e-3",
       "--maestro_update_interval", "2", "--maestro_lr", "1e-2", "--len_min", "4", "--len_max", "12"]
REWARDS = ("fmt", "ppl", "ent", "len")  # pref is skipped without a reward model
# the session's shared 2-rank run (tests/conftest.py maestro_two_rank_run): 10 steps for test_runs_repeat, whose
# first 3 and step 3's checkpoint this file reads
SHARED_STEPS = ["--max_steps", "10", "--no_final_export", "--save_steps", "3", "--save_total_limit", "4"]


def test_maestro_trains_on_two_ranks_on_the_mixed_task(maestro_two_rank_run):
    out, proc = maestro_two_rank_run
    assert_ok(proc)
    assert "pref` reward is skipped" in proc.stdout + proc.stderr
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))[:3]
    assert len(rows) == 3
    for row in rows:
        weights = [row[f"conductor/weight/{name}"] for name in REWARDS]
        assert sum(weights) == pytest.approx(1.0, abs=1e-5)
        assert 0 < row["time_share/conductor"] < 1 and 0 < row["time_share/policy_rewards"] < 1
        for name in REWARDS:
            value = row[f"reward/{name}/mean"]  # metrics.jsonl writes a non-finite value as null
            assert value is not None and not math.isnan(value), name
        assert 0 < row["conductor/entropy"] <= math.log(len(REWARDS)) + 1e-6
        for kind in ("arith", "describe"):  # --env mixed's prompt kinds: the paper's per-prompt trade-off claim
            for prefix in ("conductor/weight", "conductor/pi"):
                per_kind = [row[f"{prefix}/{kind}/{name}"] for name in REWARDS]
                assert sum(per_kind) == pytest.approx(1.0, abs=1e-5), (prefix, kind)
    # the REINFORCE step happens every 2 steps, on the buffer of both
    assert "conductor/meta_loss" not in rows[0] and "conductor/meta_loss" in rows[1] and "conductor/meta_loss" not in rows[2]
    state = torch.load(os.path.join(out, "checkpoints", "step_3", "zero_pp_rank_0_mp_rank_00_model_states.pt"), weights_only=False)
    learner = state["trainer_state"]["method"]["learner"]
    assert learner["steps_buffered"] == 1 and learner["buffer"][0][0].shape[0] == 2 * 2 * 4  # both ranks' responses


def test_resume_restores_the_conductor_and_its_buffer(tiny_model_dir, tmp_path):
    full, split = str(tmp_path / "full"), str(tmp_path / "split")
    common = ["--model_name_or_path", tiny_model_dir, *RUN, "--no_final_export", "--maestro_update_interval", "3"]
    assert_ok(run_train_in_process([*common, "--output_dir", full, "--max_steps", "4"]))
    assert_ok(run_train_in_process([*common, "--output_dir", split, "--max_steps", "4", "--enable_test_mode",
                                    "--test_stop_step", "2"]))
    resumed = run_train_in_process([*common, "--output_dir", split, "--max_steps", "4", "--resume", "auto"])
    assert_ok(resumed)
    want, got = read_metrics(os.path.join(full, "metrics.jsonl")), read_metrics(os.path.join(split, "metrics.jsonl"))
    assert [r["step"] for r in got] == [1, 2, 3, 4]
    # step 3 updates the Conductor on a buffer holding steps 1-2 from before the restart
    assert got[2]["conductor/meta_loss"] == pytest.approx(want[2]["conductor/meta_loss"], rel=1e-5)
    for name in REWARDS:
        assert got[3][f"conductor/weight/{name}"] == pytest.approx(want[3][f"conductor/weight/{name}"], abs=1e-6)


@pytest.mark.parametrize("reward,baseline", [("ppl", "NOVER"), ("em_ent", "EM-GRPO")])
def test_paper_baselines_run_as_grpo_with_one_open_domain_reward(reward, baseline, tiny_model_dir, tmp_path):
    out = str(tmp_path)
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--algo", "grpo", "--env",
                                 "mixed", "--reward_funcs", reward, "--num_generations", "4",
                                 "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "8",
                                 "--temperature", "1.0", "--max_steps", "2", "--no_final_export"])
    assert_ok(proc)
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert len(rows) == 2
    for row in rows:
        value = row[f"reward/{reward}/mean"]  # rank-normalised within each group of 4: mean 0.5 when all present
        assert value is not None and 0 <= value <= 1, (baseline, row)
        assert row["reward/mean"] == pytest.approx(value, abs=1e-5)  # the only reward is the scalar reward


def test_random_weight_vectors_and_kl_in_reward_train(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN, "--max_steps", "2",
                                 "--maestro_weights", "random", "--maestro_kl_in_reward", "0.1", "--maestro_recipe",
                                 "small", "--no_final_export"])
    assert_ok(proc)
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    for row in rows:
        assert row["maestro/kl_in_reward"] is not None and row["maestro/kl_in_reward"] >= 0  # k3 >= 0
        weights = [row[f"conductor/weight/{name}"] for name in REWARDS]
        assert sum(weights) == pytest.approx(1.0, abs=1e-5)
        assert "conductor/pi/arith/fmt" not in row  # no Conductor policy in the random arm
    # the reference was loaded (with --beta 0) for the KL, so the loss reports it too
    assert rows[1]["actor/kl"] is not None


def test_the_preference_reward_model_scores_under_a_zero3_actor(tiny_model_dir, tmp_path):
    """The reward model is loaded after the ZeRO-3 actor registered its config with transformers: it must still be
    a whole model (before, from_pretrained partitioned it and its first forward failed: "'weight' must be 2-D")."""
    rm = build_tiny_reward_model(tiny_model_dir, str(tmp_path / "rm"))
    out = str(tmp_path / "run")
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN, "--max_steps", "1",
                                 "--actor_zero_stage", "3", "--reward_model_name_or_path", rm, "--no_final_export"])
    assert_ok(proc)
    row = read_metrics(os.path.join(out, "metrics.jsonl"))[0]
    assert row["maestro/raw/pref"] is not None and math.isfinite(row["maestro/raw/pref"])
    assert "conductor/weight/pref" in row
