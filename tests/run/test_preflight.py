"""rl/run/preflight.py: a run whose ranks do not share rank 0's flags, model or data, or that cannot all reach each
other, stops at start naming the rank."""
import json
import os
import shutil

import pytest

from rl.run.preflight import disagreements, model_fingerprint
from tests.helpers import run_train

VIEW = {"host": "node-a", "flags": {"seed": 1, "algo": "grpo"}, "model": "m1", "data": "d1"}


def test_every_disagreement_names_its_rank_host_and_what_differs():
    views = [VIEW, dict(VIEW, host="node-b"), dict(VIEW, host="node-c", flags={"seed": 2, "algo": "grpo"}),
             dict(VIEW, host="node-d", model="m2", data="d2")]
    bad = disagreements(views)
    assert len(bad) == 2
    assert bad[0].startswith("rank 2 on node-c: flags --seed 2 (rank 0: 1)")
    assert bad[1] == "rank 3 on node-d: the model (config, tokenizer, weight files); the training data"
    assert disagreements([VIEW, dict(VIEW, host="node-b")]) == []  # another host alone is no disagreement


def test_the_model_fingerprint_sees_an_edited_config_or_other_weights(tiny_model_dir, tmp_path):
    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")
    assert model_fingerprint(str(copy)) == model_fingerprint(tiny_model_dir)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "rope_theta": 1.0}))
    assert model_fingerprint(str(copy)) != model_fingerprint(tiny_model_dir)
    assert model_fingerprint("Qwen/Qwen3-4B") == "hub:Qwen/Qwen3-4B"


FLAGS = ["--num_generations", "2", "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "4",
         "--max_steps", "1", "--save_strategy", "no", "--num_train_samples", "8"]


@pytest.mark.slow
def test_a_rank_with_other_data_stops_the_run_at_start_naming_it(tiny_model_dir, tmp_path):
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--env", "tests.fixture_envs:OtherDataOnRankOneEnv",
                      "--output_dir", str(tmp_path / "run"), *FLAGS], num_ranks=2)
    assert proc.returncode != 0
    assert "pre-flight: not every rank runs rank 0's experiment" in proc.stdout + proc.stderr
    assert "rank 1 on" in proc.stdout + proc.stderr and "the training data" in proc.stdout + proc.stderr
    assert not os.path.exists(tmp_path / "run" / "checkpoints")  # stopped before any model was built


@pytest.mark.slow
def test_a_rank_that_does_not_arrive_is_named_within_the_timeout(tiny_model_dir, tmp_path):
    # --dist_timeout_minutes 0.1: the pre-flight waits 6 s, rank 1 arrives after 25 s
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--env", "tests.fixture_envs:LateRankOneEnv",
                      "--output_dir", str(tmp_path / "run"), "--dist_timeout_minutes", "0.1", *FLAGS], num_ranks=2,
                     timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "pre-flight: not every rank reached the others within 6 s" in out and "1" in out.split("within 6 s")[1]


def test_a_rendezvous_that_never_completes_says_what_to_check(monkeypatch):
    import deepspeed
    import torch

    import rl.engine.dist as dist
    from rl.errors import TrainingAborted

    def never_joined(**kwargs):
        raise torch.distributed.DistStoreError("Timed out after 6 seconds waiting for clients. 1/2 clients joined.")
    monkeypatch.setattr(deepspeed, "init_distributed", never_joined)
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.7")
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(TrainingAborted, match=r"did not form: Timed out .* 1/2 clients joined.*10\.0\.0\.7:29500"):
        dist.init_distributed()
