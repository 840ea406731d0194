"""rl/update/step_guard.py on a real torch module and optimizer (one process: the collectives are the identity)."""
import math

import pytest
import torch

from rl.errors import TrainingAborted
from rl.update.step_guard import StepGuard


def guard(max_bad_steps=3, zero_stage=3):
    return StepGuard(max_bad_steps, zero_stage, "/runs/x/checkpoints")


def backward(module, scale=1.0):
    module.zero_grad()
    (module(torch.ones(2, 3)).sum() * scale).backward()


def run_step(g, step, loss_value=1.0, grad_norm=1.0):
    g.start_step()
    g.check_loss(torch.tensor(loss_value))
    return g.end_step(step, g.grad_norm(grad_norm))


def test_a_finite_step_is_not_skipped_and_counts_nothing():
    g = guard()
    assert run_step(g, 1) == {"train/skipped_step": 0.0, "train/skipped_steps_total": 0.0}
    assert g.counters == {"bad_steps_total": 0, "bad_steps_in_row": 0}


@pytest.mark.parametrize("loss_value, grad_norm", [(float("nan"), 1.0), (float("inf"), 1.0), (1.0, float("nan")),
                                                   (1.0, float("inf"))])
def test_a_nonfinite_loss_or_gradient_norm_makes_the_step_skipped_and_counted(loss_value, grad_norm):
    g = guard()
    assert run_step(g, 1, loss_value, grad_norm) == {"train/skipped_step": 1.0, "train/skipped_steps_total": 1.0}
    assert g.counters == {"bad_steps_total": 1, "bad_steps_in_row": 1}


def test_a_good_step_resets_the_run_of_bad_steps_but_not_the_total():
    g = guard()
    run_step(g, 1, float("nan"))
    run_step(g, 2, float("nan"))
    assert run_step(g, 3)["train/skipped_step"] == 0.0  # the previous step's NaN is forgotten at start_step
    assert g.counters == {"bad_steps_total": 2, "bad_steps_in_row": 0}


def test_max_bad_steps_in_a_row_abort_naming_the_flag_and_the_checkpoint_folder():
    g = guard(max_bad_steps=2)
    run_step(g, 1, float("nan"))
    with pytest.raises(TrainingAborted, match=r"2 consecutive steps .*--max_bad_steps 2.*/runs/x/checkpoints"):
        run_step(g, 2, float("nan"))


def test_counters_restored_from_a_checkpoint_continue_the_run_of_bad_steps():
    g = guard(max_bad_steps=3)
    g.counters.update({"bad_steps_total": 5, "bad_steps_in_row": 2})  # the trainer state's "counters", as saved
    with pytest.raises(TrainingAborted, match="3 consecutive steps"):
        run_step(g, 8, float("nan"))
    assert g.counters == {"bad_steps_total": 6, "bad_steps_in_row": 3}


def test_stage0_nonfinite_gradients_are_zeroed_and_the_optimizer_step_changes_nothing():
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(module.parameters(), lr=0.1, weight_decay=0.1)
    before = [p.detach().clone() for p in module.parameters()]
    g = guard(zero_stage=0)
    g.start_step()
    backward(module, scale=float("nan"))
    g.before_optimizer_step(module, optimizer)
    optimizer.step()
    assert all(torch.equal(p, b) for p, b in zip(module.parameters(), before))
    assert g.stage0_skipped and math.isnan(g.grad_norm(None))
    assert g.end_step(1, g.grad_norm(None))["train/skipped_step"] == 1.0


def test_stage0_finite_gradients_are_applied_and_their_norm_reported():
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    before = [p.detach().clone() for p in module.parameters()]
    g = guard(zero_stage=0)
    g.start_step()
    backward(module)
    expected = torch.cat([p.grad.flatten() for p in module.parameters()]).norm().item()
    g.before_optimizer_step(module, optimizer)
    optimizer.step()
    assert not g.stage0_skipped and optimizer.param_groups[0]["lr"] == 0.1
    assert g.grad_norm(None) == pytest.approx(expected)  # DeepSpeed reports no norm at stage 0 in fp32
    assert g.grad_norm(2.5) == 2.5  # the engine's own norm wins when it has one
    assert not any(torch.equal(p, b) for p, b in zip(module.parameters(), before))


def test_under_zero_the_guard_leaves_gradients_to_deepspeeds_overflow_check():
    module = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    g = guard(zero_stage=3)
    g.start_step()
    backward(module, scale=float("nan"))
    g.before_optimizer_step(module, optimizer)
    assert all(torch.isnan(p.grad).all() for p in module.parameters())
    assert optimizer.param_groups[0]["lr"] == 0.1 and not g.stage0_skipped
