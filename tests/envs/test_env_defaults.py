"""Each env declares the answer length, data keys and eval set it needs; a flag that is given always wins."""
import os

import pytest

from rl.config import parse_args
from tests.helpers import REPO_ROOT


def parsed(tiny_model_dir, *flags):
    return parse_args(["--model_name_or_path", tiny_model_dir, "--dtype", "fp32", *flags])


def test_math_gets_room_for_a_solution_and_evaluates_on_math500_not_its_training_file(tiny_model_dir):
    args = parsed(tiny_model_dir, "--env", "math", "--data_path", "data/math_train/train.jsonl", "--eval_steps", "5")
    assert args.max_answer_seq_len == 512 and (args.prompt_key, args.answer_key) == ("problem", "answer")
    assert args.eval_data_path == os.path.join(REPO_ROOT, "data", "math500", "test.jsonl")


def test_arith_keeps_the_main_job_s_length(tiny_model_dir):
    assert parsed(tiny_model_dir).max_answer_seq_len == 32


@pytest.mark.parametrize("flags,length", [(["--max_answer_seq_len", "64"], 64)])
def test_a_given_flag_wins_over_the_env_s_default(tiny_model_dir, flags, length):
    args = parsed(tiny_model_dir, "--env", "math", "--data_path", "data/math_train/train.jsonl", *flags)
    assert args.max_answer_seq_len == length


def test_eval_py_evaluates_math_on_math500_when_no_data_is_given(tiny_model_dir):
    import eval as eval_cli
    args = eval_cli.build_parser().parse_args(["--model_name_or_path", tiny_model_dir, "--env", "math"])
    eval_cli.validate(args)
    assert args.data_path.endswith(os.path.join("data", "math500", "test.jsonl")) and args.max_answer_seq_len == 512
