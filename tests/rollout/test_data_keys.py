"""A user's own rows meet the env's data keys where the flags are parsed (issue #65 item 1): an env that reads fixed
fields of its own refuses --prompt_key / --answer_key naming the env that reads them, a JSONL file's first row is
checked before any model loads, and the code env tells MBPP, HumanEval and LiveCodeBench rows apart by their own
fields, so their documented --prompt_key / --answer_key are optional."""
import json
import os

import pytest

from envs import env_class
from rl import REPO_ROOT
from rl.config import parse_args
from rl.rollout.data import load_rows, reads_data_keys

LCB_FILE = os.path.join(REPO_ROOT, "tests", "data", "lcb_style.jsonl")


def _parsed(tiny_model_dir, *flags):
    return parse_args(["--model_name_or_path", tiny_model_dir, "--dtype", "fp32", *flags])


def _refusal(tiny_model_dir, *flags) -> str:
    with pytest.raises(SystemExit) as exc:
        _parsed(tiny_model_dir, *flags)
    return str(exc.value)


@pytest.fixture
def question_rows(tmp_path):
    path = tmp_path / "my.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {a} + 1?", "answer": str(a + 1)}) + "\n"
                            for a in range(4)))
    return str(path)


def test_the_default_env_refuses_a_prompt_key_it_would_not_read_and_names_math(tiny_model_dir, question_rows):
    message = _refusal(tiny_model_dir, "--data_path", question_rows, "--prompt_key", "question")
    assert "--env arith reads a row's 'prompt' and 'answer' fields" in message
    assert "--prompt_key question" in message and "--env math" in message


def test_own_rows_without_the_env_s_fields_are_refused_at_parse_time_not_after_the_model_loads(tiny_model_dir,
                                                                                                 question_rows):
    message = _refusal(tiny_model_dir, "--data_path", question_rows)
    assert f"{question_rows}:1: missing key 'prompt'" in message and "--env math" in message


def test_math_takes_a_user_s_question_answer_rows(tiny_model_dir, question_rows):
    args = _parsed(tiny_model_dir, "--env", "math", "--data_path", question_rows, "--prompt_key", "question")
    assert (args.prompt_key, args.answer_key) == ("question", "answer")


def test_arith_still_reads_rows_in_its_own_fields(tiny_model_dir, tmp_path):
    path = tmp_path / "sums.jsonl"
    path.write_text(json.dumps({"prompt": "What is 2 + 2?", "answer": 4}) + "\n")
    args = _parsed(tiny_model_dir, "--data_path", str(path))
    assert (args.prompt_key, args.answer_key) == ("prompt", "answer")


def test_only_the_envs_with_fields_of_their_own_ignore_the_flags():
    assert not any(reads_data_keys(env_class(name)) for name in ("arith", "arith_multi", "mixed", "toolcall"))
    assert all(reads_data_keys(env_class(name)) for name in ("math", "code", "appworld"))


@pytest.mark.parametrize("path", [LCB_FILE, os.path.join(REPO_ROOT, "data", "humaneval", "test.jsonl"),
                                  os.path.join(REPO_ROOT, "data", "mbpp", "sanitized.jsonl")])
def test_code_rows_are_recognised_by_their_own_fields_without_key_flags(tiny_model_dir, path):
    args = _parsed(tiny_model_dir, "--env", "code", "--data_path", path)
    cls = env_class("code")
    rows = load_rows(path, cls.data_keys(args.prompt_key, args.answer_key), check=cls.check_row)
    env = cls(prompt_key=args.prompt_key, answer_key=args.answer_key)
    assert env.reset(rows[0])[-1]["content"].strip()


def test_code_still_requires_a_field_the_flags_name(tiny_model_dir):
    message = _refusal(tiny_model_dir, "--env", "code", "--data_path", LCB_FILE, "--answer_key", "tests")
    assert "missing key 'tests'" in message
    _parsed(tiny_model_dir, "--env", "code", "--data_path", LCB_FILE, "--prompt_key", "question_content",
            "--answer_key", "public_test_cases")  # the flags the docs used to require still work
