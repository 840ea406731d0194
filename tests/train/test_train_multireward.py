"""GDPO and DARA end to end on 2 ranks under the real launcher, with per-reward metrics."""
import math
import os

import pytest

from rl.log.loggers import read_metrics
from tests.helpers import run_train
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok

pytestmark = pytest.mark.slow
REWARDS = ["--reward_funcs", "correctness,length,tests.fixture_envs:half_reward", "--length_limit", "1"]


@pytest.mark.parametrize("algo_args", [["--algo", "gdpo", "--final_norm", "token"],
                                       ["--algo", "dara", "--dara_variant", "asym"],
                                       ["--algo", "dara", "--dara_variant", "sym"]],
                         ids=["gdpo", "dara-asym", "dara-sym"])
def test_multi_reward_methods_train_on_two_ranks(algo_args, tiny_model_dir, tmp_path):
    out = str(tmp_path)
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, "--max_steps", "2",
                      "--no_final_export", *TINY_RUN, *REWARDS, *algo_args], num_ranks=2)
    assert_ok(proc)
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert len(rows) == 2
    last = rows[-1]
    for name in ("correctness", "length", "half"):
        for stat in ("mean", "std", "frac_zero_std"):
            assert f"reward/{name}/{stat}" in last
    assert last["reward/half/mean"] == 0.5 and last["reward/half/frac_zero_std"] == 1.0
    # the abstaining component: no statistics (NaN, written as null in metrics.jsonl), never a crash
    assert last["reward/judge/mean"] is None
    assert last["reward/length/errors"] == 0.0
    assert math.isfinite(last["advantage/mean"]) and math.isfinite(last["advantage/std"])
    if "dara" in algo_args:
        assert last["dara/w/half"] == 1.0 and last["dara/rho/half"] == 0.0  # a constant reward is never active
        assert 1.0 <= last["dara/w/length"] <= 5.0
