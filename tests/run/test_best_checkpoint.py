"""Keep-the-best (--save_best_metric, rl/run/best_checkpoint.py): which metric names and values count, that a SIGKILL at
any moment leaves OUTPUT_DIR/best a complete model, and a real run with --eval_before_train and sampled validation
(--eval_n, --eval_temperature) whose best folder is the export of its best validated step."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from rl.run.best_checkpoint import BEST_LINK, RECORD, check_metric_name, is_better, read_best
from rl.config import parse_args
from rl.log.loggers import read_metrics
from tests.helpers import REPO_ROOT, run_train_in_process
from tests.procs import process_state

FIXTURE_ENV = "tests.fixture_envs:DigitFractionEnv"


def test_higher_is_better_except_turns_to_success_and_regression_and_nan_never_wins():
    assert is_better("eval/pass@1", 0.5, None) and is_better("eval/pass@1", 0.6, 0.5)
    assert not is_better("eval/pass@1", 0.5, 0.5)  # a tie keeps the earlier step
    assert is_better("eval/avg_turns_to_success", 1.5, 2.0) and not is_better("eval/regression_rate", 0.3, 0.2)
    assert not is_better("eval/avg_turns_to_success", math.nan, None)  # no sample succeeded: nothing to keep


def test_metric_names_are_the_ones_the_validation_logs():
    assert check_metric_name("eval/pass@4", [1, 2, 4], 4, 1) is None
    assert check_metric_name("eval/success_by_turn/2", [1], 1, 2) is None
    assert "eval/<eval.py's name>" in check_metric_name("pass@1", [1], 1, 1)
    assert "not logged by this run's validation" in check_metric_name("eval/pass@8", [1, 2, 4], 4, 1)
    assert check_metric_name("eval/regression_rate", [1], 1, 1) is not None  # single-turn runs log no regression


@pytest.mark.parametrize("flags, message", [
    (["--save_best_metric", "eval/pass@1"], "--save_best_metric needs validation: add --eval_steps"),
    (["--eval_before_train"], "--eval_before_train needs validation"),
    (["--eval_steps", "2", "--save_best_metric", "val/pass@1"], "--save_best_metric val/pass@1: the metric must"),
    (["--eval_steps", "2", "--eval_n", "4"], "--eval_n > 1 with greedy decoding"),
    (["--eval_steps", "2", "--eval_n", "0"], "--eval_n must be >= 1"),
])
def test_bad_best_and_validation_flags_are_refused_naming_the_flag(tiny_model_dir, flags, message):
    with pytest.raises(SystemExit, match=message):
        parse_args(["--model_name_or_path", tiny_model_dir, "--env", FIXTURE_ENV, *flags])


# --- a kill at any moment -------------------------------------------------------------------------------------

SAVER = """
import os, sys, types
from rl.run.best_checkpoint import BestCheckpoint
from rl.engine.models import load_tokenizer
from transformers import AutoModelForCausalLM, LlamaForCausalLM  # noqa: F401 - imported once, before the forks
model_dir, out = sys.argv[1], sys.argv[2]
for _ in sys.stdin:  # a line: a new saver process, forked so that only the first pays the imports
    pid = os.fork()
    if pid == 0:  # the saver: every step a new best, saved back to back until the parent's parent kills it
        actor = types.SimpleNamespace(module=AutoModelForCausalLM.from_pretrained(model_dir))
        tokenizer = load_tokenizer(model_dir)
        keeper = BestCheckpoint("eval/pass@1", out, resumed=True)  # what the last killed saver left, from disk
        step = (keeper.best_step or 0) + 1
        while True:
            keeper.consider(step, {"eval/pass@1": float(step)}, actor, tokenizer)
            print("saved", step, flush=True)
            step += 1
    print("saver", pid, flush=True)
    os.waitpid(pid, 0)
    print("reaped", flush=True)
"""


def assert_best_is_complete(out: str):
    from transformers import AutoModelForCausalLM
    link = os.path.join(out, BEST_LINK)
    assert os.path.islink(link)
    record = read_best(out)
    assert os.path.basename(os.path.realpath(link)) == f"best_step_{record['step']}"
    assert record == {"metric": "eval/pass@1", "value": float(record["step"]), "step": record["step"]}
    AutoModelForCausalLM.from_pretrained(link)  # weights and config complete
    return record["step"]


def read_line_within(forker, seconds: float, saver: int) -> str:
    """The forker's next line, or a failure naming both processes' states: in CI on 2026-12-06 one wait for "reaped"
    after the SIGKILL never ended (pytest-timeout at 300 s, not reproduced in isolation), and said nothing of why."""
    import threading
    line = []  # read on a thread: a select() on the pipe would miss lines already in the reader's buffer
    reader = threading.Thread(target=lambda: line.append(forker.stdout.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    if reader.is_alive():  # (the `finally` kills the forker, which ends the thread's read)
        pytest.fail(f"no line from the forker in {seconds:.0f} s after the saver's SIGKILL: saver "
                    f"{process_state(saver)}; forker {process_state(forker.pid)}")
    return line[0]


@pytest.mark.slow
def test_a_sigkill_during_best_saves_leaves_best_a_complete_model(tiny_model_dir, tmp_path):
    out = str(tmp_path / "run")
    os.makedirs(out)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, OMP_NUM_THREADS="1")
    forker = subprocess.Popen([sys.executable, "-c", SAVER, tiny_model_dir, out], cwd=REPO_ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        last = 0
        for kill_after in (2, 3, 4):  # kill at a different point of the save each time
            forker.stdin.write("go\n")
            forker.stdin.flush()
            saver, saves = None, 0
            while saver is None or saves < kill_after:  # (DeepSpeed's import prints a warning line first)
                line = forker.stdout.readline()
                assert line and not line.startswith("reaped"), "the saver died before its saves"
                saves += line.startswith("saved")
                saver = int(line.split()[1]) if line.startswith("saver ") else saver
            time.sleep(0.01 * kill_after)  # somewhere inside the next save
            os.kill(saver, signal.SIGKILL)
            line = "saved"
            while not line.startswith("reaped"):  # (after the saves it printed before it died)
                line = read_line_within(forker, 240, saver)
                assert line, "the forking process died"
            step = assert_best_is_complete(out)
            assert step >= last + kill_after  # resumed from the best it found: nothing went backwards
            last = step
    finally:
        forker.kill()
        forker.wait()
    folders = [n for n in os.listdir(out) if n.startswith("best_step_")]
    assert len(folders) <= 2  # the one `best` names, plus at most the last kill's leftover (the next save removes it)


# --- a real run -----------------------------------------------------------------------------------------------

def weights(model_dir: str) -> dict:
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir).state_dict()


@pytest.mark.slow
def test_a_run_keeps_the_export_of_its_best_validated_step_starting_from_step_0(tiny_model_dir, tmp_path):
    out = str(tmp_path / "best_run")
    # train.py's main() in this process: not a test of the launcher
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--env", FIXTURE_ENV,
                                 "--num_generations", "4", "--per_device_generation_batch_size", "2",
                                 "--max_answer_seq_len", "12", "--temperature", "1.0", "--actor_learning_rate", "1e-2",
                                 "--num_train_samples", "200", "--max_steps", "3", "--eval_steps", "1", "--eval_limit",
                                 "4", "--eval_before_train", "--eval_n", "2", "--eval_temperature", "1.0",
                                 "--save_best_metric", "eval/mean_final_score", "--save_model_only_steps", "1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # step 0: the initial model, before any update
    assert set(rows[0]) >= {"eval/pass@1", "eval/pass@2", "eval/mean@2"} and "actor/loss" not in rows[0]
    scores = [r["eval/mean_final_score"] for r in rows]
    best_step = scores.index(max(scores))  # the first of the highest: a tie keeps the earlier step
    for row in rows:  # the running best, logged at each validation
        assert row["best/step"] == scores.index(max(scores[:row["step"] + 1]))
        assert row["best/eval/mean_final_score"] == max(scores[:row["step"] + 1])
    assert read_best(out) == {"metric": "eval/mean_final_score", "value": max(scores), "step": best_step}
    assert [n for n in os.listdir(out) if n.startswith("best_step_")] == [f"best_step_{best_step}"]
    exported = {0: tiny_model_dir, 1: os.path.join(out, "hf", "step_1"), 2: os.path.join(out, "hf", "step_2"),
                3: os.path.join(out, "final")}[best_step]
    expected, kept = weights(exported), weights(os.path.join(out, BEST_LINK))
    assert all(torch.equal(expected[k], kept[k]) for k in expected)
    with open(os.path.join(out, BEST_LINK, RECORD)) as f:
        assert json.load(f)["step"] == best_step
