"""The README's shell entry points, run for real on the tiny model (setup.sh is a no-op once it has run)."""
import json
import os
import shutil
import subprocess

import pytest

from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.slow


def run_script(args, **env):
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", **env)
    return subprocess.run(["bash", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_train_sh_without_a_final_export_skips_the_final_eval_instead_of_failing(tiny_model_dir, tmp_path):
    out = str(tmp_path / "run")
    proc = run_script(["scripts/train.sh", "--no_final_export", "--num_train_samples", "8"],
                      MODEL=tiny_model_dir, OUTPUT=out, MAX_STEPS="1", EVAL_SAMPLES="2", PROMPTS_PER_RANK="2",
                      MAX_NEW_TOKENS="4", DTYPE="fp32")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "final evaluation skipped" in proc.stdout
    assert "initial accuracy" in proc.stdout  # the summary still prints what there is


def test_eval_benchmark_keeps_each_models_results_in_its_own_folder(tiny_model_dir, tmp_path):
    models = [str(tmp_path / name / "final") for name in ("run_a", "run_b")]
    for model in models:
        shutil.copytree(tiny_model_dir, model)
    written = []
    try:
        for model in models:
            proc = run_script(["scripts/eval_benchmark.sh", "gsm8k"], MODEL=model, LIMIT="1", N="1", K="1",
                              MAX_TURNS="1", TEMPERATURE="0", MAX_NEW_TOKENS="2", DTYPE="fp32")
            assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
            tag = model.strip("/").replace("/", "_")
            written.append(os.path.join(REPO_ROOT, "output", "eval", "gsm8k", tag))
        for folder, model in zip(written, models):
            with open(os.path.join(folder, "results.json")) as f:
                assert json.load(f)["config"]["model_name_or_path"] == model
    finally:
        for folder in written:
            shutil.rmtree(folder, ignore_errors=True)
