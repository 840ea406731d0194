"""No prompt lost or repeated across kills (issue #51 item 2): a run SIGKILLed during a rollout, during an update
and during a save, and resumed after each, trains the same sequence of prompts as an uninterrupted run: each step's
prompts as its completions log shows them (every response logged), each checkpoint's record of the data rows it
consumed (rl/rollout/data.py's PromptStream.consumed), and the metrics.

The run: 8 data rows, 2 prompts a step (an epoch every 4 steps), 7 steps, a checkpoint every 2. The killed run dies
in step 3's rollout (its prompts drawn; the checkpoint of step 2 stays), is resumed and dies in step 5's update, is
resumed from step 4 and dies in step 6's save, and is resumed from step 4 again to the end. Each kill is a process
of its own (tests/faults.py); the uninterrupted run and the last resume run train.py's main() in this process."""
import json
import os
import signal
import subprocess
import sys

import pytest

from rl.log.loggers import read_metrics
from rl.run.checkpoint import complete_checkpoints, latest_checkpoint, trainer_state_of
from tests.helpers import REPO_ROOT, run_train_in_process
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok
from rl.log.step_metrics import CLOCK_METRICS

pytestmark = pytest.mark.slow
STEPS, PROMPTS_PER_STEP, ROWS = 7, 2, 8
RUN = [*TINY_RUN[:-2], "--num_train_samples", str(ROWS), "--max_steps", str(STEPS), "--save_steps", "2",
       "--save_total_limit", "0", "--log_completions", "8", "--no_final_export"]  # 8 = every response of a step
TIMING_KEYS = CLOCK_METRICS


def killed(args: list, fault: list) -> subprocess.Popen:
    """train.py with a kill fault, a process of its own (started, not waited for)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false")
    return subprocess.Popen([sys.executable, "-m", "tests.faults", *fault, *args, "--dtype", "fp32"], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def assert_killed(proc: subprocess.Popen):
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL, f"exit {proc.returncode}, not a SIGKILL:\n{output[-3000:]}"


def trained_prompts(out: str) -> list:
    """[(step, group, prompt)] of every response the run's completions log holds: what each kept step trained."""
    with open(os.path.join(out, "completions.jsonl")) as f:
        return [(r["step"], r["group"], r["prompt"]) for r in map(json.loads, f)]


def records(out: str) -> dict:
    """{step: the data rows its checkpoint records as consumed} of every complete checkpoint."""
    root = os.path.join(out, "checkpoints")
    return {trainer_state_of(os.path.join(root, tag))["step"]: trainer_state_of(os.path.join(root, tag))["data"]
            ["consumed"] for tag in complete_checkpoints(root)}


def test_a_run_killed_in_a_rollout_an_update_and_a_save_trains_every_prompt_once(tiny_model_dir, tmp_path):
    whole, out = str(tmp_path / "whole"), str(tmp_path / "killed")
    args = ["--model_name_or_path", tiny_model_dir, *RUN]
    first = killed([*args, "--output_dir", out], ["--kill_in_rollout_at_step", "3"])  # beside the uninterrupted run
    assert_ok(run_train_in_process([*args, "--output_dir", whole]))
    assert_killed(first)
    root = os.path.join(out, "checkpoints")
    assert latest_checkpoint(root) == "step_2"
    for fault, resumes_at in ((["--kill_in_update_at_step", "5"], 2), (["--kill_in_save_at_step", "6"], 4)):
        assert_killed(killed([*args, "--output_dir", out], fault))
        assert latest_checkpoint(root) == "step_4", (fault, resumes_at)
    assert os.path.isdir(os.path.join(root, ".tmp-step_6"))  # the save the last kill cut short
    resumed = run_train_in_process([*args, "--output_dir", out])
    assert_ok(resumed)
    assert "at step 4" in resumed.stdout

    # the prompts trained: the same, step by step, as the uninterrupted run's
    got, want = trained_prompts(out), trained_prompts(whole)
    assert got == want
    assert [step for step, _, _ in got] == [s for s in range(1, STEPS + 1) for _ in range(PROMPTS_PER_STEP * 4)]
    # none missing, none twice: each position of the stream trained in exactly one step, 4 responses each
    groups = [group for _, group, _ in got]
    assert sorted(set(groups)) == list(range(STEPS * PROMPTS_PER_STEP))
    assert all(groups.count(g) == 4 for g in set(groups))

    # each checkpoint's record: the data rows consumed up to its step, as the uninterrupted run consumed them
    final = records(whole)[STEPS]
    assert len(final) == STEPS * PROMPTS_PER_STEP
    assert sorted(final[:ROWS]) == list(range(ROWS))  # the first epoch: every row once
    assert len(set(final[ROWS:])) == len(final[ROWS:])  # the second, so far: none twice
    kept = records(out)
    assert sorted(kept) == [2, 4, 6, 7]
    for step, consumed in kept.items():
        assert consumed == final[:step * PROMPTS_PER_STEP], step
    # the same rows give the same prompt text wherever they were drawn
    text = {}
    for _, group, prompt in got:
        assert text.setdefault(final[group], prompt) == prompt

    # and the same training: every logged value but the timings
    rows = [{k: v for k, v in r.items() if not k.startswith(TIMING_KEYS)} for r in read_metrics(
        os.path.join(out, "metrics.jsonl"))]
    assert rows == [{k: v for k, v in r.items() if not k.startswith(TIMING_KEYS)} for r in read_metrics(
        os.path.join(whole, "metrics.jsonl"))]
