"""Runs repeat (issue #51 item 4): two runs of the same commit, seed and flags on the same machine log the same
metrics, every value but the timings, bit for bit, for their first 10 steps: GRPO and TCPO on one rank, MAESTRO on
two ranks under the real launcher (MAESTRO is the method whose recorded rerun did not reproduce its original:
docs/reproducibility.md says why that rerun differed, and what cannot repeat).

Each one-rank pair is one run in this process and one in a process of its own started with another
PYTHONHASHSEED, side by side on the two cores: a result that hangs on Python's string hashing (the order of a set)
or on state a process carries shows as a difference."""
import os
import subprocess
import sys

import pytest

from rl.log.loggers import read_metrics
from tests.helpers import REPO_ROOT, run_train, run_train_in_process
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok
from tests.train.test_train_maestro import RUN as MAESTRO_RUN, SHARED_STEPS as MAESTRO_SHARED_STEPS
from rl.log.step_metrics import CLOCK_METRICS

pytestmark = pytest.mark.slow
STEPS = ["--max_steps", "10", "--no_final_export"]
TIMING_KEYS = CLOCK_METRICS  # wall-clock measurements: never the same twice


def logged(out: str) -> list:
    """metrics.jsonl of a run, every value but the timings."""
    return [{k: v for k, v in row.items() if not k.startswith(TIMING_KEYS)}
            for row in read_metrics(os.path.join(out, "metrics.jsonl"))]


def assert_same_metrics(first: str, second: str):
    rows, again = logged(first), logged(second)
    assert [r["step"] for r in rows] == list(range(1, 11)) == [r["step"] for r in again]
    for row, other in zip(rows, again):
        differ = sorted(k for k in row.keys() | other.keys() if row.get(k) != other.get(k))
        assert not differ, f"step {row['step']}: " + ", ".join(f"{k} {row.get(k)!r} != {other.get(k)!r}"
                                                               for k in differ[:6])


def run_twice_on_one_rank(args: list, tmp_path):
    """One run in this process, the same flags in a process of its own beside it; their output folders."""
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false",
               PYTHONHASHSEED="12345")
    other = subprocess.Popen([sys.executable, "train.py", *args, "--output_dir", second, "--dtype", "fp32"],
                             cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert_ok(run_train_in_process([*args, "--output_dir", first]))
    finally:
        output, _ = other.communicate(timeout=600)
    assert other.returncode == 0, output[-4000:]
    return first, second


@pytest.mark.parametrize("algo", [
    ["--algo", "grpo"],
    ["--algo", "tcpo", "--max_turns", "3", "--tcpo_cf_budget", "3"],  # counterfactual turns, drawn alternatives
])
def test_a_one_rank_run_repeats_its_metrics(algo, tiny_model_dir, tmp_path):
    first, second = run_twice_on_one_rank(["--model_name_or_path", tiny_model_dir, *TINY_RUN, *algo, *STEPS],
                                          tmp_path)
    assert_same_metrics(first, second)


def test_a_two_rank_maestro_run_repeats_its_metrics(maestro_two_rank_run, tiny_model_dir, tmp_path):
    """The Conductor's draws, its meta-updates (every 2 steps), the policy rewards and both ranks' gathers. The first
    run is the session's shared one (tests/conftest.py maestro_two_rank_run, which test_train_maestro reads too)."""
    first, _ = maestro_two_rank_run
    second = str(tmp_path / "second")
    assert_ok(run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", second, *MAESTRO_RUN,
                         *MAESTRO_SHARED_STEPS], num_ranks=2))
    outs = [first, second]
    assert_same_metrics(*outs)
    assert "conductor/meta_loss" in logged(outs[0])[1]  # the meta-update ran within the compared steps
