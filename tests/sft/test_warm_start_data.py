"""rl/sft/warm_start_data.py: warm-start examples come from train rows only, each target accepted by its verifier."""
import json

import pytest

from envs.arith import arith_key, is_eval_problem
from envs.toolcall_data import is_held_out
from rl.sft import warm_start_data
from tests.helpers import REPO_ROOT

TOOLCALL = {"categories": "simple_python,multiple,parallel,parallel_multiple", "irrelevance": False, "data": None,
            "example": False, "max_schema_chars": 1200}


def test_toolcall_examples_are_bfcl_train_questions_only():
    examples, counts = warm_start_data.warm_start_rows("toolcall", 10000, 0, TOOLCALL)
    assert len(examples) > 500 and counts["examples"] == len(examples)
    assert not any(is_held_out(e["id"]) for e in examples)  # BFCL's split: crc32(id) % 10 < 2 is held out
    # a question whose text is also a held-out question's is refused too, and a target BFCL's checker rejects is
    # dropped: both counted, never written
    assert counts["held_out_refused"] > 0 and counts["target_rejected"] > 0
    assert all(e["completion"][0]["content"].startswith("<think>") for e in examples)


def test_arith_and_mixed_examples_never_use_an_eval_problem():
    for env in ("arith", "mixed"):
        examples, _ = warm_start_data.warm_start_rows(env, 300, 0, {})
        sums = [e for e in examples if "What is" in e["prompt"][-1]["content"]]
        assert sums
        for e in sums:
            a, op, b = e["prompt"][-1]["content"].split("?")[0].removeprefix("What is ").split()
            assert not is_eval_problem(arith_key({"a": int(a), "op": op, "b": int(b)}))


def test_math_examples_refuse_a_math500_problem(tmp_path):
    with open(f"{REPO_ROOT}/data/math500/test.jsonl") as f:
        held_out = json.loads(f.readline())
    train = tmp_path / "train.jsonl"
    rows = [{"id": "t1", "problem": "What is $1+1$?", "answer": "2"}, {**held_out, "id": "leak"}]
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples, counts = warm_start_data.warm_start_rows("math", 10, 0, {}, data_path=str(train))
    assert [e["id"] for e in examples] == ["t1"] and counts["held_out_refused"] == 1


def test_the_command_writes_prompt_completion_rows(tmp_path):
    out = tmp_path / "d" / "arith.jsonl"
    warm_start_data.main(["--env", "arith", "--n", "5", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and all(r["completion"][0]["role"] == "assistant" and r["env"] == "arith" for r in rows)


def test_an_env_without_a_target_is_counted_not_guessed():
    examples, counts = warm_start_data.warm_start_rows("arith_multi", 5, 0, {})
    assert examples == [] and counts["no_target"] == 5
