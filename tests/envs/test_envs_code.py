import json
import os

import pytest

from envs import make_env
from envs.code_env import extract_code
from tests.eval.test_eval_cli import eval_in_process
from tests.helpers import REPO_ROOT

LCB_FILE = os.path.join(REPO_ROOT, "tests", "data", "lcb_style.jsonl")  # written for the tests (test_code_tasks.py)
LCB_FLAGS = ["--prompt_key", "question_content", "--answer_key", "public_test_cases"]


def mbpp_row(task_id=2):
    with open(os.path.join(REPO_ROOT, "data", "mbpp", "sanitized.jsonl")) as f:
        return next(r for r in map(json.loads, f) if r["task_id"] == task_id)


def test_extract_code_takes_the_last_fenced_block():
    assert extract_code("x\n```python\na = 1\n```\ntext\n```python\nb = 2\n```") == "b = 2\n"
    assert extract_code("```\nc = 3\n```") == "c = 3\n"
    assert extract_code("```python\nunfinished = True") == "unfinished = True"
    assert extract_code("no code") is None


def test_code_env_scores_pass_rate_and_feeds_back_the_failing_test():
    row = mbpp_row()
    env = make_env("code", prompt_key="prompt", answer_key="test_list", max_turns=2)
    messages = env.reset(row)
    assert row["prompt"] in messages[0]["content"] and "```python" in messages[0]["content"]
    wrong = env.step("```python\ndef similar_elements(a, b):\n    return ()\n```")
    assert wrong.score == 0.0 and not wrong.done
    feedback = wrong.observation[0]["content"]
    assert "assert set(similar_elements" in feedback and "AssertionError" in feedback
    right = env.step(f"```python\n{row['code']}\n```")
    assert right.score == 1.0 and right.done


def test_humaneval_rows_are_checked_with_their_entry_point():
    with open(os.path.join(REPO_ROOT, "data", "humaneval", "test.jsonl")) as f:
        row = json.loads(f.readline())
    env = make_env("code", prompt_key="prompt", answer_key="test")
    env.reset(row)
    assert env.step(f"```python\n{row['prompt']}{row['canonical_solution']}\n```").score == 1.0
    env.reset(row)
    assert env.step("```python\ndef has_close_elements(numbers, threshold):\n    return False\n```").score == 0.0


def test_eval_py_reads_livecodebench_rows_and_names_a_bad_one(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "code", "--data_path", LCB_FILE,
                            *LCB_FLAGS, "--limit", "5", "--max_new_tokens", "4", "--output_dir", str(out)], capsys)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "results.json").read_text())
    assert len(result["problems"]) == 5
    bad = tmp_path / "bad.jsonl"
    with open(LCB_FILE) as f:
        first, second = f.readlines()[:2]
    bad.write_text(first + second.replace('"testtype\\": \\"stdin\\"', '"testtype\\": \\"file\\"'))
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--env", "code", "--data_path", str(bad),
                            *LCB_FLAGS, "--output_dir", str(tmp_path / "eval_bad")], capsys)
    assert proc.returncode == 1 and f"bad eval data: {bad}:2: 'public_test_cases' case 0" in proc.stderr, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("algo,launcher,data", [pytest.param("grpo", True, "mbpp", id="grpo"),
                                                pytest.param("tcpo", False, "livecodebench", id="tcpo")])
def test_code_env_trains_end_to_end(algo, launcher, data, tiny_model_dir, tmp_path):
    """Under the real `deepspeed` launcher once, on MBPP; the second method on LiveCodeBench-layout rows through
    train.py's main() in the test process (the same one-rank DeepSpeed engine, without the launcher's or an
    interpreter's imports of torch)."""
    from rl.log.loggers import read_metrics
    from tests.helpers import run_train, run_train_in_process
    data_flags = (["--data_path", os.path.join(REPO_ROOT, "data", "mbpp", "sanitized.jsonl"), "--prompt_key", "prompt",
                   "--answer_key", "test_list"] if data == "mbpp" else ["--data_path", LCB_FILE, *LCB_FLAGS])
    args = ["--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path), "--algo", algo, "--env", "code",
            *data_flags, "--max_turns", "2", "--max_steps", "2", "--num_generations", "2",
            "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "8", "--max_prompt_seq_len", "512",
            "--no_final_export"]
    proc = run_train(args, num_ranks=1) if launcher else run_train_in_process(args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(read_metrics(os.path.join(str(tmp_path), "metrics.jsonl"))) == 2
