"""A user's own data (Parquet) and own env through train.py: its components and info reach metrics.jsonl, and the
sampled completions reach completions.jsonl and TensorBoard."""
import json
import os

import pytest

from tests.helpers import run_train_in_process

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def parquet_run(tiny_model_dir, tmp_path_factory):
    import pandas as pd
    tmp = tmp_path_factory.mktemp("parquet_run")
    data = str(tmp / "train.parquet")
    pd.DataFrame([{"prompt": f"What is {a} + 1?", "answer": str(a + 1)} for a in range(8)]).to_parquet(data)
    out = str(tmp / "out")
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--env", "tests.fixture_envs:PartsEnv",
                                 "--data_path", data, "--prompt_key", "prompt", "--output_dir", out, "--max_steps", "2",
                                 "--num_generations", "2", "--per_device_generation_batch_size", "2",
                                 "--max_answer_seq_len", "6", "--temperature", "1.0", "--actor_zero_stage", "0",
                                 "--no_final_export", "--enable_tensorboard", "--log_completions", "3"])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def _strict(path):
    def refuse(name):
        raise ValueError(f"bare {name}")
    with open(path) as f:
        return [json.loads(line, parse_constant=refuse) for line in f]


def test_env_components_and_numeric_info_are_step_metrics(parquet_run):
    rows = _strict(os.path.join(parquet_run, "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["env/brevity/mean"] == 1.0
        assert 0.0 <= r["env/digits/mean"] <= 1.0 and 0.0 <= r["env/info/solved/mean"] <= 1.0
        assert r["env/info/chars/mean"] > 0
        assert not any("note" in k for k in r)


def test_sampled_completions_are_logged_each_step(parquet_run):
    records = _strict(os.path.join(parquet_run, "completions.jsonl"))
    assert [r["step"] for r in records] == [1, 1, 1, 2, 2, 2]
    for r in records:
        assert r["prompt"].startswith("What is ") and isinstance(r["completion"], str)
        assert set(r["components"]) == {"correctness"} and isinstance(r["advantage"], float)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(os.path.join(parquet_run, "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    assert len(events.Tensors("completions/text_summary")) == 2
