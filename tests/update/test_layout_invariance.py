"""The same update at any batch layout (issue #51 item 1): one training step from the same weights and the same
rollout gives the same gradient and the same parameters on 1 or 2 ranks, at ZeRO stage 0, 2 or 3, with micro-batches
of 1, 2 or a rank's whole batch (with and without gradient accumulation), with --skip_zero_advantage_rows on or off,
for each --loss_agg_mode (tests/update/layout_sweep.py runs every combination: in this process for 1 rank, once
under the real launcher for 2).

Tolerances (fp32; what differs between layouts is only the order of the sums):
- the gradient the optimizer consumes: |g - g_ref| <= 1e-5 |g_ref| (measured: at most 1.1e-7);
- the loss (actor/loss): within 1e-5 of it, or of 1 where it is smaller;
- every parameter after the AdamW step at lr 1e-2: within 1e-4 (measured: at most 1.8e-6; Adam's first step is about
  lr x sign(g), so a gradient entry near 0 amplifies rounding; a wrong direction moves an entry by up to 2e-2).
A mis-scaled loss (TRL PR #6024's gradient-accumulation bug) shows in the gradient, whose scale AdamW's step hides.
"""
import os
import subprocess
import sys

import pytest
import torch

from rl.update.loss import LOSS_AGG_MODES
from tests.helpers import REPO_ROOT, free_port, one_rank_process_group
from tests.update import layout_sweep

pytestmark = pytest.mark.slow
GRAD_RTOL, LOSS_RTOL, PARAM_ATOL = 1e-5, 1e-5, 1e-4


@pytest.fixture(scope="module")
def one_rank(tiny_model_dir):
    """Every 1-rank combination's result, run in this process (and "start": the weights before)."""
    with one_rank_process_group():
        return layout_sweep.sweep(tiny_model_dir)


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir, tmp_path_factory, one_rank):
    """Every 2-rank combination's result, from one launch (a fixture of its own: each test's time limit covers one
    of the two sweeps)."""
    out = str(tmp_path_factory.mktemp("layout") / "two_ranks.pt")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO_ROOT, TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "deepspeed"), "--num_gpus", "2",
                           "--master_port", str(free_port()), "--module", "tests.update.layout_sweep", tiny_model_dir,
                           out], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"STDOUT:\n{proc.stdout[-3000:]}\nSTDERR:\n{proc.stderr[-3000:]}"
    two = torch.load(out, weights_only=False)
    torch.testing.assert_close(two.pop("start"), one_rank["start"], rtol=0, atol=0)  # the same starting weights
    return two


def reference_name(agg: str) -> str:
    """The plainest layout: one rank, no ZeRO, the whole batch in one micro-batch, every row trained."""
    rows = layout_sweep.GLOBAL_ROWS
    return layout_sweep.combination(1, 0, rows, rows, False, agg)


def differences(got: dict, want: dict) -> list:
    """What differs beyond the tolerances, in words (empty: the same step)."""
    out = []
    grad_err = float((got["grad"] - want["grad"]).norm() / want["grad"].norm())
    if grad_err > GRAD_RTOL:
        out.append(f"gradient differs by {grad_err:.2e} of its norm (x{got['grad'].norm() / want['grad'].norm():.4f})")
    if abs(got["loss"] - want["loss"]) > LOSS_RTOL * max(abs(want["loss"]), 1.0):  # seq-mean-token-mean's is ~0
        out.append(f"loss {got['loss']:.6g} against {want['loss']:.6g}")
    param_err = float((got["params"] - want["params"]).abs().max())
    if param_err > PARAM_ATOL:
        out.append(f"a parameter differs by {param_err:.2e} after the step")
    return out


def broken_layouts(one: dict, results: dict) -> list:
    """Every combination of `results` whose step differs from the reference's (in `one`) of its --loss_agg_mode,
    with what differs."""
    broken = []
    for agg in LOSS_AGG_MODES:
        want = one[reference_name(agg)]
        assert float((want["params"] - one["start"]).abs().max()) > 5e-3, agg  # the step moved the weights
        for name, got in results.items():
            if name.endswith(f"loss_agg_mode={agg}"):
                broken += [f"{name}: {d}" for d in differences(got, want)]
    return broken


def test_one_step_is_the_same_at_every_one_rank_layout(one_rank):
    broken = broken_layouts(one_rank, {k: v for k, v in one_rank.items() if k != "start"})
    assert not broken, "layouts that give another step than " + reference_name("...") + ":\n" + "\n".join(broken)


def test_the_aggregation_modes_are_different_steps(one_rank):
    """The comparison is per --loss_agg_mode because the modes are different objectives: their gradients differ."""
    grads = [one_rank[reference_name(agg)]["grad"] for agg in LOSS_AGG_MODES]
    for i in range(len(grads)):
        for j in range(i + 1, len(grads)):
            assert float((grads[i] - grads[j]).norm() / grads[j].norm()) > 1e-2, (LOSS_AGG_MODES[i], LOSS_AGG_MODES[j])


def test_one_step_is_the_same_at_every_two_rank_layout(one_rank, two_ranks):
    broken = broken_layouts(one_rank, two_ranks)
    assert not broken, "layouts that give another step than " + reference_name("...") + ":\n" + "\n".join(broken)


def test_the_sweep_covers_every_layout(one_rank, two_ranks):
    names = {**one_rank, **two_ranks}.keys() - {"start"}
    assert len(names) == 2 * 3 * 2 * len(LOSS_AGG_MODES) + 3 * 3 * 2 * len(LOSS_AGG_MODES)  # 2 ranks: micro 1, 2
    for fragment in ("ranks=1", "ranks=2", "zero_stage=0", "zero_stage=2", "zero_stage=3", "(no accumulation)",
                     "(accumulation 4)", "micro_batch=1", "skip_zero_advantage_rows=on",
                     "skip_zero_advantage_rows=off", *(f"loss_agg_mode={agg}" for agg in LOSS_AGG_MODES)):
        assert any(fragment in name for name in names), fragment
