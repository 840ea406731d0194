"""Validation during training (--eval_steps, rl/eval/validation.py): eval/ metrics at the right steps, equal to what
eval.py reports for the model of that step, on every rank count, without changing the training itself."""
import os

import pytest

import eval as eval_cli
from rl.config import parse_args
from rl.log.loggers import read_metrics
from rl.eval.validation import PeriodicValidation, rank_shard
from tests.helpers import ZERO3_TWO_RANK_RUN, default_args, run_train

FIXTURE_ENV = "tests.fixture_envs:DigitFractionEnv"


def test_every_rank_plays_the_same_number_of_rows_and_each_row_once():
    shards = [rank_shard(5, r, 2) for r in range(2)]
    assert shards == [([0, 2, 4], 3), ([1, 3, 1], 2)]
    assert sorted(i for rows, real in shards for i in rows[:real]) == [0, 1, 2, 3, 4]
    assert rank_shard(1, 1, 3) == ([0], 0)  # a rank with no row of its own still joins the collective generate


def test_validation_runs_every_n_steps_and_after_the_last():
    validation = PeriodicValidation.from_args(default_args(eval_steps=0), None, None, 5)
    assert not any(validation.due(s) for s in range(1, 6))
    validation.every = 2
    assert [s for s in range(1, 6) if validation.due(s)] == [2, 4, 5]


@pytest.mark.parametrize("flags, message", [
    (["--eval_steps", "-1"], "--eval_steps must be >= 0"),
    (["--eval_steps", "2", "--eval_limit", "0"], "--eval_limit >= 1"),
    (["--eval_steps", "2", "--eval_data_path", "/nonexistent/eval.jsonl"], "--eval_data_path"),
    (["--eval_steps", "2", "--env", "code", "--data_path", "data/mbpp/sanitized.jsonl"], "pass --eval_data_path"),
])
def test_bad_validation_flags_are_refused_at_parse_time(tiny_model_dir, flags, message):
    with pytest.raises(SystemExit, match=message):
        parse_args(["--model_name_or_path", tiny_model_dir, *flags])


def test_validation_metrics_are_eval_py_metrics_of_the_same_model(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from rl.engine.models import load_tokenizer
    args = default_args(env=FIXTURE_ENV, eval_steps=1, eval_limit=6, max_answer_seq_len=12)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    got = PeriodicValidation.from_args(args, model, load_tokenizer(tiny_model_dir), 1).after_step(1)
    expected = eval_cli.main(["--model_name_or_path", tiny_model_dir, "--env", FIXTURE_ENV, "--limit", "6",
                              "--max_new_tokens", "12", "--max_prompt_seq_len", str(args.max_prompt_seq_len)])
    assert got["eval/num_problems"] == 6
    assert nan_as_none({k[len("eval/"):]: v for k, v in got.items() if k.startswith("eval/") and k != "eval/num_problems"}) \
        == nan_as_none(expected["metrics"])


def test_sampled_validation_is_eval_py_at_the_same_n_temperature_and_seed(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from rl.engine.models import load_tokenizer
    args = default_args(env=FIXTURE_ENV, eval_steps=1, eval_limit=4, eval_n=4, eval_temperature=1.0,
                        max_answer_seq_len=12, seed=3)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    got = PeriodicValidation.from_args(args, model, load_tokenizer(tiny_model_dir), 1).after_step(1)
    expected = eval_cli.main(["--model_name_or_path", tiny_model_dir, "--env", FIXTURE_ENV, "--limit", "4",
                              "--max_new_tokens", "12", "--max_prompt_seq_len", str(args.max_prompt_seq_len),
                              "--n", "4", "--k", "1,2,4", "--temperature", "1.0", "--seed", "3"])["metrics"]
    assert {"pass@1", "pass@2", "pass@4", "mean@4"} <= set(expected)
    assert nan_as_none({k[len("eval/"):]: v for k, v in got.items() if k.startswith("eval/") and k != "eval/num_problems"}) \
        == nan_as_none(expected)


def test_pass_at_k_is_logged_for_powers_of_two_up_to_n():
    from rl.eval.validation import eval_ks
    assert [eval_ks(n) for n in (1, 2, 6, 8)] == [[1], [1, 2], [1, 2, 4, 6], [1, 2, 4, 8]]


def nan_as_none(metrics: dict) -> dict:
    return {k: None if v != v else v for k, v in metrics.items()}  # NaN (no success: avg_turns_to_success) != NaN


# --- real launcher runs ---------------------------------------------------------------------------------------

def eval_py_score(model_dir: str) -> dict:
    return eval_cli.main(["--model_name_or_path", model_dir, "--env", FIXTURE_ENV, "--limit", "5",
                          "--max_new_tokens", "12", "--max_prompt_seq_len", "256", "--dtype", "fp32"])["metrics"]


@pytest.mark.slow
def test_two_rank_validation_logs_eval_metrics_at_its_steps_equal_to_eval_py(zero3_two_rank_run, tiny_model_dir,
                                                                             tmp_path):
    # the session's 2-rank ZeRO-3 run (tests/conftest.py) with validation on: every 2 steps, so at steps 2 and 4
    out = str(tmp_path / "val")
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *ZERO3_TWO_RANK_RUN, "--eval_steps",
                      "2", "--eval_limit", "5", "--save_model_only_steps", "2", "--enable_tensorboard"], num_ranks=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert not any(k.startswith("eval/") for row in (rows[0], rows[2]) for k in row)  # steps 1 and 3: none due
    # the random base model's greedy answers hold no digit (score 0): a positive score is the trained actor's
    assert rows[3]["eval/mean_final_score"] > 0
    for row, model_dir in ((rows[1], os.path.join(out, "hf", "step_2")), (rows[3], os.path.join(out, "final"))):
        assert row["eval/num_problems"] == 5  # 5 rows over 2 ranks: one rank pads its shard, nothing counted twice
        expected = eval_py_score(model_dir)
        for key in ("pass@1", "mean_final_score", "success_by_turn/1"):
            assert row[f"eval/{key}"] == pytest.approx(expected[key], abs=1e-6), (row["step"], key)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(os.path.join(out, "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/pass@1")] == [2, 4]

    # validation does not change what is trained: the same run without it (the shared run) has the same metrics
    plain = read_metrics(os.path.join(zero3_two_rank_run[0], "metrics.jsonl"))
    assert [r["step"] for r in plain] == [1, 2, 3, 4]
    for with_eval, without in zip(rows, plain):
        for key in ("reward/mean", "actor/loss", "actor/grad_norm"):
            assert with_eval[key] == pytest.approx(without[key], rel=1e-6), (with_eval["step"], key)


def test_validation_reads_the_held_out_rows_with_the_envs_own_flags(tiny_model_dir):
    """--eval_steps with --env toolcall --toolcall_categories parallel validates on eval.py's rows for the same flags
    (the env's dataset once ignored its flags here: every category was validated)."""
    pytest.importorskip("bfcl_eval")
    from rl.engine.models import load_tokenizer
    flags = ["--env", "toolcall", "--toolcall_categories", "parallel"]
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--eval_steps", "1", "--eval_limit", "5", *flags])
    from transformers import AutoModelForCausalLM
    validation = PeriodicValidation.from_args(args, AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                                              load_tokenizer(tiny_model_dir), 1)
    eval_args = eval_cli.build_parser().parse_args(["--model_name_or_path", tiny_model_dir, "--limit", "5", *flags])
    eval_cli.validate(eval_args)
    expected = eval_cli.eval_rows(eval_args)
    assert [row["id"] for row in validation.rows] == [row["id"] for row in expected]
    assert all(row["id"].startswith("parallel") for row in validation.rows), [row["id"] for row in validation.rows]
