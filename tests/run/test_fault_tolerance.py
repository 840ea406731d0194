"""Crash safety: exact resume, a kill during a save, signals, failing rewards, NaN steps, an orphaned rank.

Exact resume runs 2 ranks under the real launcher (ZeRO-3 shards and each rank's RNG are what it is about) and is
compared with the session's uninterrupted 2-rank run (tests/conftest.py's zero3_two_rank_run), and the orphaned rank
needs the launcher it outlives. The other tests are not about ranks or the launcher: they run
train.py's main() in the test process (run_train_in_process, the real DeepSpeed engine; a run that is killed or
signalled keeps `python train.py`, a process of its own), with --actor_zero_stage 3 where the test ran 2 ranks before
(ZeRO-3 being the several-rank default), so that they take the same save path."""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from rl.run.checkpoint import latest_checkpoint
from rl.log.loggers import read_metrics
from tests.procs import alive, children, cmdline
from tests.helpers import REPO_ROOT, ZERO3_TWO_RANK_RUN, free_port, run_train, run_train_in_process
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok
from rl.log.step_metrics import CLOCK_METRICS

pytestmark = pytest.mark.slow

# 8 training rows, 2 ranks x 2 prompts: every 2 steps is one pass over the data, so step 2 is an epoch boundary.
RUN = [*TINY_RUN[:-2], "--num_train_samples", "8", "--max_steps", "4", "--no_final_export"]
ZERO3 = ["--actor_zero_stage", "3"]  # one process defaults to stage 0 (rl/engine/zero_config.py)
TIMING_KEYS = CLOCK_METRICS


def comparable(row):
    return {k: v for k, v in row.items() if not k.startswith(TIMING_KEYS)}


def final_params(out):
    """Actor parameters of the latest checkpoint, consolidated from the ZeRO-3 shards by DeepSpeed's tool."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    root = os.path.join(out, "checkpoints")
    return get_fp32_state_dict_from_zero_checkpoint(root, tag=latest_checkpoint(root))


def test_stop_and_resume_at_an_epoch_boundary_matches_an_uninterrupted_run(zero3_two_rank_run, tiny_model_dir,
                                                                           tmp_path):
    # the shared run's flags (8 rows: step 2 ends an epoch), stopped at step 2 and resumed; neither export nor
    # TensorBoard (which the shared run makes) changes what is trained
    uninterrupted, out = zero3_two_rank_run[0], str(tmp_path)
    run = ["--model_name_or_path", tiny_model_dir, "--output_dir", out, *ZERO3_TWO_RANK_RUN, "--no_final_export"]
    first = run_train([*run, "--enable_test_mode", "--test_stop_step", "2"], num_ranks=2)
    assert_ok(first)
    assert latest_checkpoint(os.path.join(out, "checkpoints")) == "step_2"
    second = run_train([*run, "--resume", "auto"], num_ranks=2)
    assert_ok(second)
    assert "resumed from" in second.stdout and "at step 2" in second.stdout

    resumed_rows, full_rows = read_metrics(os.path.join(out, "metrics.jsonl")), read_metrics(
        os.path.join(uninterrupted, "metrics.jsonl"))
    assert [r["step"] for r in resumed_rows] == [1, 2, 3, 4]
    for got, want in zip(resumed_rows, full_rows):
        assert comparable(got) == pytest.approx(comparable(want), rel=1e-6, abs=1e-7), got["step"]
    got, want = final_params(out), final_params(uninterrupted)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=1e-6, msg=name)


def test_a_kill_during_a_save_keeps_the_previous_checkpoint_and_resume_works(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    # a process of its own, which the fault SIGKILLs; the resume after it runs in this one
    killed = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN, *ZERO3, "--save_steps", "1"],
                       launcher=False, faults=["--kill_in_save_at_step", "3"])
    assert killed.returncode != 0
    root = os.path.join(out, "checkpoints")
    assert latest_checkpoint(root) == "step_2"
    assert os.path.isdir(os.path.join(root, ".tmp-step_3"))  # the half-written save, never named by `latest`
    resumed = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN, *ZERO3,
                                    "--save_steps", "1"])
    assert_ok(resumed)
    assert "at step 2" in resumed.stdout
    assert latest_checkpoint(root) == "step_4"
    assert not os.path.exists(os.path.join(root, ".tmp-step_3"))
    assert [r["step"] for r in read_metrics(os.path.join(out, "metrics.jsonl"))] == [1, 2, 3, 4]


def test_save_total_limit_keeps_the_newest_checkpoints(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    assert_ok(run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN,
                                    "--save_steps", "1", "--save_total_limit", "2", "--resume", "none"]))
    root = os.path.join(out, "checkpoints")
    assert sorted(n for n in os.listdir(root) if n.startswith("step_")) == ["step_3", "step_4"]


def test_sigterm_finishes_the_step_saves_and_exits_zero(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT)
    proc = subprocess.Popen([sys.executable, "train.py", "--model_name_or_path", tiny_model_dir, "--output_dir", out,
                             *TINY_RUN, "--max_steps", "500", "--no_final_export"], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics = os.path.join(out, "metrics.jsonl")
    deadline = time.time() + 180
    while time.time() < deadline and not (os.path.exists(metrics) and read_metrics(metrics)):
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output[-3000:]
    assert "SIGTERM received" in output and "checkpoint saved" in output
    steps = [r["step"] for r in read_metrics(metrics)]
    assert 1 <= len(steps) < 500
    assert latest_checkpoint(os.path.join(out, "checkpoints")) == f"step_{steps[-1]}"


def test_a_reward_that_starts_raising_stops_the_run_with_a_checkpoint_of_the_state_before(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    args = ["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN, *ZERO3]
    args[args.index("tests.fixture_envs:DigitFractionEnv")] = "tests.fixture_envs:DownAfterFirstStepEnv"
    proc = run_train_in_process(args)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "reward calls failed at step 2" in text and "--max_reward_error_rate" in text
    assert "ConnectionError" in text  # the counted errors are logged with their cause
    assert latest_checkpoint(os.path.join(out, "checkpoints")) == "step_1"  # resuming retries step 2's batch
    assert [r["step"] for r in read_metrics(os.path.join(out, "metrics.jsonl"))] == [1]


def test_a_nan_step_is_skipped_and_repeated_nan_steps_stop_the_run(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    # ZeRO-3 on one rank (no longer the one-process default): DeepSpeed's own overflow check skips the step
    assert_ok(run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN, *ZERO3,
                                    "--save_steps", "1", "--save_total_limit", "0", "--resume", "none"],
                                   faults=["--nan_loss_at_steps", "2"]))
    root = os.path.join(out, "checkpoints")
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    after1 = get_fp32_state_dict_from_zero_checkpoint(root, tag="step_1")
    after2 = get_fp32_state_dict_from_zero_checkpoint(root, tag="step_2")
    assert all(torch.equal(after1[k], after2[k]) for k in after1)  # the NaN step changed nothing
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert [r["train/skipped_step"] for r in rows] == [0.0, 1.0, 0.0, 0.0]

    stopped = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN, *ZERO3,
                                    "--save_steps", "1", "--resume", "none", "--max_bad_steps", "2"],
                                   faults=["--nan_loss_at_steps", "2,3"])
    assert stopped.returncode != 0
    assert "2 consecutive steps had non-finite loss or gradients" in stopped.stdout + stopped.stderr
    assert latest_checkpoint(root) == "step_2"  # saved after the (skipped) step 2; step 3 never saved


def test_a_nan_step_without_zero_changes_no_weight_and_the_next_step_trains(tiny_model_dir, tmp_path):
    # stage 0 has no DeepSpeed overflow check: the step guard zeroes the gradient and steps with lr 0
    out = str(tmp_path)
    assert_ok(run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN,
                                    "--actor_zero_stage", "0", "--save_steps", "1", "--save_total_limit", "0",
                                    "--resume", "none", "--max_steps", "3"], faults=["--nan_loss_at_steps", "2"]))
    root = os.path.join(out, "checkpoints")
    weights = {tag: torch.load(os.path.join(root, tag, "mp_rank_00_model_states.pt"), weights_only=False)["module"]
               for tag in ("step_1", "step_2", "step_3")}
    assert all(torch.equal(weights["step_1"][k], weights["step_2"][k]) for k in weights["step_1"])
    assert not all(torch.equal(weights["step_2"][k], weights["step_3"][k]) for k in weights["step_2"])
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert [r["train/skipped_step"] for r in rows] == [0.0, 1.0, 0.0]
    assert rows[2]["actor/lr"] > 0  # the scheduler set the learning rate again after the skipped step


def test_a_rank_orphaned_by_a_killed_launcher_saves_and_stops_so_the_run_continues(tiny_model_dir, tmp_path):
    """SIGKILL to DeepSpeed's launch process under plain `deepspeed`: the rank used to train on unseen, holding the
    output folder's lock. Now it gets SIGTERM from the kernel (rl/run/launch_ranks.py's stop_with_launcher, armed by
    train.py), saves its step and exits, and a resume continues from there. `deepspeed` itself still exits 0 (its
    runner drops negative exit codes, outside credo): scripts/launch.py reports the lost launch (tests/run/
    test_launch.py)."""
    out = str(tmp_path)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false")
    runner = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "deepspeed"), "--num_gpus", "1",
                               "--master_port", str(free_port()), "train.py", "--model_name_or_path", tiny_model_dir,
                               "--output_dir", out, *TINY_RUN, "--max_steps", "500", "--no_final_export",
                               "--dtype", "fp32"],
                              cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    metrics, rank_pid, launch = os.path.join(out, "metrics.jsonl"), None, []
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (os.path.exists(metrics) and read_metrics(metrics)):
            time.sleep(0.5)
        launch = [p for p in children(runner.pid) if "deepspeed.launcher.launch" in cmdline(p)]
        assert launch and len(children(launch[0])) == 1, "no rank training under the launch process"
        rank_pid = children(launch[0])[0]
        os.kill(launch[0], signal.SIGKILL)
        output, _ = runner.communicate(timeout=120)  # the rank holds the output pipe until it exits
        assert runner.returncode == 0  # DeepSpeed's runner: a launch killed by a signal reads as success
        assert "SIGTERM received" in output and "checkpoint saved" in output, output[-3000:]
        deadline = time.time() + 60
        while alive(rank_pid) and time.time() < deadline:
            time.sleep(0.2)
        assert not alive(rank_pid), "the orphaned rank trains on"
        last = read_metrics(metrics)[-1]["step"]
        assert latest_checkpoint(os.path.join(out, "checkpoints")) == f"step_{last}"

        resumed = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *TINY_RUN,
                                        "--max_steps", str(last + 1), "--no_final_export", "--dtype", "fp32"])
        assert_ok(resumed)  # the lock went with the orphan; the run continues from its save
        assert [r["step"] for r in read_metrics(metrics)][-1] == last + 1
    finally:
        for pid in [rank_pid, *launch, runner.pid]:
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
        runner.wait(timeout=30)
