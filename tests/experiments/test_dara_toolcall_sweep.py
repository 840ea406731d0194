"""experiments/sweeps/dara_toolcall.sh (issue #48 item 7): both pre-registered sweeps plan their 18 runs, each
run's flags passing train.py's validation (compare.py --plan parses every run and runs nothing)."""
import os
import re
import subprocess

import pytest

from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.slow  # two compare.py processes (~10-20 s), no training


def test_both_sweeps_plan_three_arms_by_three_paired_seeds(tiny_model_dir, tmp_path):
    proc = subprocess.run(["bash", "experiments/sweeps/dara_toolcall.sh", "--plan", "--cache_dir", str(tmp_path)],
                          cwd=REPO_ROOT, env=dict(os.environ, MODEL=tiny_model_dir), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = re.findall(r"compare: (\S+) seed (\d): to run", proc.stdout + proc.stderr)
    arms = {(m, s) for m in ("gdpo", "dara-asym", "grpo") for s in "123"}
    assert len(planned) == 18 and set(planned) == arms  # 9 per sweep: tool_format,tool_correct and + think_length
    assert not os.listdir(tmp_path) or not any(f.endswith(".sweep.json") for f in os.listdir(tmp_path))
