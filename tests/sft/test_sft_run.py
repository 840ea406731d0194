"""sft.py end to end on the tiny Llama: exact resume, the export that train.py and eval.py take, and the same steps
on 2 ZeRO-3 ranks as on 1."""
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO_ROOT, free_port, rewind_run

pytestmark = pytest.mark.slow

# arith's own train split, 6 steps of 4 examples; a linear LR decay, so a resume must restore the schedule too
RUN = ["--env", "arith", "--num_train_samples", "40", "--max_steps", "6", "--per_device_train_batch_size", "2",
       "--gradient_accumulation_steps", "2", "--actor_learning_rate", "1e-3", "--lr_scheduler_type", "linear",
       "--max_seq_len", "256", "--save_steps", "3", "--save_total_limit", "0", "--save_model_only_steps", "2", "--eval_steps", "3", "--eval_limit", "4",
       "--max_answer_seq_len", "8", "--dtype", "fp32", "--seed", "7"]


def run_sft(args: list, num_ranks: int = 1, launcher: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false")
    if launcher:
        cmd = [os.path.join(os.path.dirname(sys.executable), "deepspeed"), "--num_gpus", str(num_ranks),
               "--master_port", str(free_port()), "sft.py", *args]
    else:
        cmd = [sys.executable, "sft.py", *args]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def metrics(out: str) -> list:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def trained(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith(("train/", "actor/", "eval/loss"))}


@pytest.fixture(scope="module")
def sft_run(tiny_model_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("sft") / "run")
    run_sft(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN])
    return out


def test_a_resumed_run_repeats_the_uninterrupted_one(sft_run, tiny_model_dir, tmp_path):
    rewound = rewind_run(sft_run, str(tmp_path / "rewound"), 3)
    proc = run_sft(["--model_name_or_path", tiny_model_dir, "--output_dir", rewound, *RUN])
    assert "resumed from" in proc.stdout + proc.stderr
    whole, resumed = metrics(sft_run), metrics(rewound)
    assert [r["step"] for r in resumed] == list(range(1, 7))
    for a, b in zip(whole[3:], resumed[3:]):
        assert trained(a).keys() == trained(b).keys()
        for key, value in trained(a).items():
            assert b[key] == pytest.approx(value, rel=1e-6, abs=1e-9), (a["step"], key)
    assert whole[-1]["actor/lr"] < whole[0]["actor/lr"]  # the schedule moved, and the resume followed it

    from safetensors.torch import load_file
    for a, b in zip(*(load_file(os.path.join(d, "final", "model.safetensors")).items() for d in (sft_run, rewound))):
        assert a[0] == b[0] and torch.equal(a[1], b[1])


def test_the_export_is_what_train_and_eval_take(sft_run, tiny_model_dir):
    from transformers import AutoModelForCausalLM
    final = os.path.join(sft_run, "final")
    tuned = AutoModelForCausalLM.from_pretrained(final)
    assert sorted(os.listdir(os.path.join(sft_run, "hf"))) == ["step_2", "step_4"]  # --save_model_only_steps 2
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert any(not torch.equal(p, q) for p, q in zip(tuned.parameters(), base.parameters()))  # it trained
    assert metrics(sft_run)[-1]["train/loss"] < metrics(sft_run)[0]["train/loss"]
    assert "eval/pass@1" in metrics(sft_run)[-1] and "eval/loss" in metrics(sft_run)[2]
    from rl.config import parse_args
    assert parse_args(["--model_name_or_path", final, "--max_steps", "1"]).model_name_or_path == final
    proc = subprocess.run([sys.executable, "eval.py", "--model_name_or_path", final, "--limit", "2",
                           "--max_new_tokens", "4", "--dtype", "fp32", "--output_dir", os.path.join(sft_run, "ev")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert os.path.exists(os.path.join(sft_run, "ev", "results.json"))


def test_two_zero3_ranks_train_the_steps_one_rank_does(tiny_model_dir, tmp_path):
    # the same global batch of 4 examples: 1 rank x 2 x 2 accumulation, or 2 ZeRO-3 ranks x 1 x 2; the loss is the
    # mean over every trained token of the step, so the two runs take the same steps up to float rounding
    common = ["--model_name_or_path", tiny_model_dir, "--env", "arith", "--num_train_samples", "16", "--max_steps", "3",
              "--gradient_accumulation_steps", "2", "--actor_learning_rate", "1e-3", "--max_seq_len", "256",
              "--save_strategy", "no", "--dtype", "fp32", "--no_env_eval", "--eval_limit", "4"]
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    run_sft([*common, "--per_device_train_batch_size", "2", "--actor_zero_stage", "0", "--output_dir", one])
    run_sft([*common, "--per_device_train_batch_size", "1", "--actor_zero_stage", "3", "--output_dir", two],
            num_ranks=2, launcher=True)
    for a, b in zip(metrics(one), metrics(two)):
        assert b["train/trained_tokens"] == a["train/trained_tokens"]
        assert b["train/loss"] == pytest.approx(a["train/loss"], rel=1e-4)
        if "eval/loss" in a:
            assert b["eval/loss"] == pytest.approx(a["eval/loss"], rel=1e-4)
