"""DAPO's dynamic sampling and truncated-completion mask, trained for real on the tiny random Llama (dynamic sampling
on two ranks under the `deepspeed` launcher): what reaches the update is what the flags promise."""
import os

import pytest
import torch

from rl.log.loggers import read_metrics
from tests.helpers import run_train, run_train_in_process
from tests.train.test_train_deepspeed import assert_ok, load_params

pytestmark = pytest.mark.slow

TINY = ["--num_generations", "4", "--per_device_generation_batch_size", "2", "--temperature", "1.0",
        "--actor_learning_rate", "1e-2", "--num_train_samples", "200", "--enable_test_mode"]


@pytest.fixture(scope="module")
def filtered_two_rank_run(tiny_model_dir, tmp_path_factory):
    """About half of HalfSilentEnv's groups score 0 in every response."""
    out = str(tmp_path_factory.mktemp("filter_groups_2rank"))
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--env",
                      "tests.fixture_envs:HalfSilentEnv", "--max_answer_seq_len", "8", "--test_stop_step", "2",
                      "--filter_groups", "--filter_groups_max_rounds", "0", "--no_final_export", *TINY,
                      "--dtype", "fp32", "--vllm_is_correction", "token_truncate"], num_ranks=2, timeout=1800)
    assert_ok(proc)
    return out


def test_no_zero_spread_group_reaches_the_update_and_the_batch_stays_full(filtered_two_rank_run):
    rows = read_metrics(os.path.join(filtered_two_rank_run, "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["frac_zero_std_groups"] == 0.0  # scored on the gathered batch the advantages and the loss see
        assert r["filter_groups/kept_groups"] == 4 and r["filter_groups/responses"] == 16  # 2 ranks x 2 prompts x 4
        assert r["filter_groups/drawn_groups"] == 4 * r["filter_groups/rounds"]
    assert sum(r["filter_groups/dropped_groups"] for r in rows) > 0  # the env did produce silent groups
    assert max(r["filter_groups/rounds"] for r in rows) > 1


def test_the_decode_loops_log_probs_follow_each_kept_row_across_rounds_into_the_correction(filtered_two_rank_run):
    """The rollout correction on credo's decode loop under dynamic sampling: the recorded log-probs of the rows kept
    from several rounds reach the update aligned with them (fp32: the gap is float rounding; a row given another
    round's or row's log-probs would be off by whole nats), and the truncation at the cap of 2 touches nothing."""
    rows = read_metrics(os.path.join(filtered_two_rank_run, "metrics.jsonl"))
    assert max(r["filter_groups/rounds"] for r in rows) > 1
    for r in rows:
        assert 0.0 <= r["rollout/logp_diff_mean"] <= r["rollout/logp_diff_max"] < 2e-5
        assert r["rollout/is_truncated_frac"] == 0.0


def test_both_ranks_ran_the_same_rounds_and_consumed_the_same_prompts(filtered_two_rank_run):
    """Each round draws one global batch of prompts: a rank that ran a different number of rounds would have
    another data position (and would have hung the other's collectives)."""
    rows = read_metrics(os.path.join(filtered_two_rank_run, "metrics.jsonl"))
    expected = int(sum(r["filter_groups/rounds"] for r in rows)) * 2 * 2  # rounds x ranks x prompts per rank
    root = os.path.join(filtered_two_rank_run, "checkpoints", "step_2")
    for rank in (0, 1):
        state = torch.load(os.path.join(root, f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt"), weights_only=False)
        assert state["trainer_state"]["data"]["position"] == expected, rank


def test_masked_truncated_completions_leave_the_weights_untouched(tiny_model_dir, tmp_path):
    """With a 4-token budget the random model never ends a response (checked below), so every response is truncated:
    masked, the update has no token to learn from and the weights stay exactly the same. The overlong penalty
    (buffer 2) lands on every reward at its floor, -1."""
    out = str(tmp_path / "masked")
    # one rank in the test process: the mask and the penalty are per response (the launcher is the 2-rank run's above)
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--env",
                                 "tests.fixture_envs:DigitFractionEnv", "--max_answer_seq_len", "4", "--test_stop_step",
                                 "2", "--mask_truncated_completions", "--overlong_buffer_len", "2", *TINY])
    assert_ok(proc)
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    for r in rows:
        assert r["response_length/truncated_frac"] == 1.0  # the premise: no response ended within 4 tokens
        assert r["reward/overlong/mean"] == -1.0 and r["reward/overlong/frac"] == 1.0
        assert r["reward/mean"] == pytest.approx(r["reward/correctness/mean"] - 1.0, abs=1e-6)
        assert r["actor/grad_norm"] == 0.0 and r["actor/loss"] == 0.0
    before, after = load_params(tiny_model_dir), load_params(os.path.join(out, "final"))
    assert all(torch.equal(before[k], after[k]) for k in before)
