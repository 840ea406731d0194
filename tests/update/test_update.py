"""rl/update/ppo.py on real DeepSpeed stage-0 engines (tiny Llama, one process, lr 0 so every update sees the same
weights): the step's gradient is the global batch's whatever the micro-batch size, and the sampler's log-probs
are measured and, under --vllm_is_correction tis, reweight the loss."""
import math

import pytest
import torch

from rl.update.step_guard import StepGuard
from rl.types import Rollout
from rl.update.ppo import LossSettings, ppo_update
from tests.helpers import one_rank_process_group

pytestmark = pytest.mark.slow
N, P, R = 4, 3, 5  # responses on this rank, prompt width, response width


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    """{micro-batch size: a stage-0 DeepSpeed engine of the same tiny model}; DeepSpeed fixes the gradient
    accumulation (N // micro) when it builds an engine."""
    with one_rank_process_group():
        import deepspeed
        from transformers import AutoModelForCausalLM
        out = {}
        for micro in (1, 2, 4):
            model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
            cfg = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": N // micro,
                   "train_batch_size": N, "zero_optimization": {"stage": 0}, "gradient_clipping": 1.0,
                   "steps_per_print": 10 ** 9,
                   "optimizer": {"type": "AdamW", "params": {"lr": 0.0, "torch_adam": True}}}
            out[micro], *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        yield out
        out.clear()


def rollout_batch(rollout_logp=None) -> Rollout:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 90, (N, P + R), generator=gen)
    attention = torch.ones(N, P + R, dtype=torch.long)
    attention[0, 0] = 0                                  # a left-padded prompt
    lengths = torch.tensor([5, 2, 4, 1])                 # responses of different lengths, right-padded
    response_mask = (torch.arange(R)[None, :] < lengths[:, None]).float()
    attention[:, P:] = response_mask.long()
    return Rollout(input_ids=ids, attention_mask=attention, response_mask=response_mask, prompt_len=P,
                   group_ids=torch.tensor([0, 0, 1, 1]), completions=[""] * N, samples=[{}] * N,
                   turn_ids=torch.where(response_mask > 0, 0, -1), advantages=torch.tensor([1.0, -1.0, 0.5, -0.5]),
                   rollout_logp=rollout_logp)


def update(engine, micro, batch, is_correction="none", skip_zero_rows=False, loss_agg_mode="token-mean"):
    settings = LossSettings(micro=micro, ppo_epochs=1, temperature=1.0, clip_ratio_low=0.2, clip_ratio_high=0.2,
                            clip_ratio_c=3.0, loss_agg_mode=loss_agg_mode, beta=0.0, kl_type="k3", norm_len=R,
                            is_correction=is_correction, is_cap=2.0, skip_zero_rows=skip_zero_rows)
    guard = StepGuard(max_bad_steps=3, zero_stage=0, checkpoint_dir="unused")
    guard.start_step()
    metrics = ppo_update(engine, batch, settings, guard).metrics(with_kl=False)
    return metrics, guard.stage0_grad_norm


def test_the_steps_gradient_and_stats_do_not_depend_on_the_micro_batch_size(engines):
    results = {micro: update(engine, micro, rollout_batch()) for micro, engine in engines.items()}
    metrics, grad_norm = results[4]
    assert grad_norm > 0 and metrics["actor/clipfrac"] == 0.0  # one pass: the ratio is 1, nothing is clipped
    assert metrics["actor/pg_loss"] == pytest.approx(metrics["actor/loss"], rel=1e-6)  # beta 0: no KL term
    for micro in (1, 2):
        other, other_norm = results[micro]
        assert other_norm == pytest.approx(grad_norm, rel=1e-5), micro
        for key in ("actor/entropy", "actor/loss", "actor/pg_loss", "actor/approx_kl"):
            assert other[key] == pytest.approx(metrics[key], rel=1e-5, abs=1e-7), (micro, key)
    assert "actor/kl" not in metrics and not any(k.startswith("rollout/") for k in metrics)


def test_sampler_logprobs_are_measured_and_tis_reweights_the_loss(engines):
    _, plain_norm = update(engines[2], 2, rollout_batch())
    # the trainer's log-probs of the sampled tokens, shifted: as if the sampler put 0.5 less log-mass on each
    trainer_logp = update_logp(engines[2])
    sampler_logp = (trainer_logp - 0.5) * rollout_batch().response_mask
    measured, measured_norm = update(engines[2], 2, rollout_batch(sampler_logp), is_correction="none")
    corrected, corrected_norm = update(engines[2], 2, rollout_batch(sampler_logp), is_correction="tis")
    for metrics in (measured, corrected):
        assert metrics["rollout/logp_diff_mean"] == pytest.approx(0.5, abs=1e-5)
        assert metrics["rollout/logp_diff_max"] == pytest.approx(0.5, abs=1e-5)
        assert metrics["rollout/is_truncated_frac"] == 0.0  # exp(0.5) = 1.65 is under the cap of 2
    assert measured_norm == pytest.approx(plain_norm, rel=1e-6)  # measured only: the loss is unchanged
    # every token's weight is exp(0.5): the whole gradient scales by it
    assert corrected_norm == pytest.approx(math.exp(0.5) * plain_norm, rel=1e-5)


def update_logp(engine) -> torch.Tensor:
    from rl.update.batching import batched_response_logprobs
    batch = rollout_batch()
    return batched_response_logprobs(engine, batch.input_ids, batch.attention_mask, P, 1.0, 2)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_leaving_out_zero_advantage_rows_gives_the_same_step(engines, loss_agg_mode):
    """--skip_zero_advantage_rows: a group whose responses all scored alike has advantage 0 on every token; the
    update leaves its rows out and the gradient (and the loss, whose denominators stay the global batch's) is the
    same as training on every row."""
    def batch():
        b = rollout_batch()
        b.advantages = torch.tensor([0.0, 0.0, 0.5, -0.5])  # group 0 without signal
        return b
    full, full_norm = update(engines[2], 2, batch(), loss_agg_mode=loss_agg_mode)
    skipped, skipped_norm = update(engines[2], 2, batch(), skip_zero_rows=True, loss_agg_mode=loss_agg_mode)
    assert full["train/rows_skipped_frac"] == 0.0 and skipped["train/rows_skipped_frac"] == 0.5
    assert full_norm > 0 and skipped_norm == pytest.approx(full_norm, rel=1e-5)
    assert skipped["actor/loss"] == pytest.approx(full["actor/loss"], rel=1e-5, abs=1e-8)


def test_the_update_counts_the_forward_shapes_its_mfu_is_made_of(engines):
    """perf/mfu/actor's numerator counts what the update's forwards ran: each micro-batch trimmed to its own columns
    (the least left padding, through its last real response token) and the LM head on its response positions + 1."""
    from rl.log.step_metrics import UpdateRoofline, update_flops, update_roofline_metrics
    settings = LossSettings(micro=1, ppo_epochs=2, temperature=1.0, clip_ratio_low=0.2, clip_ratio_high=0.2,
                            clip_ratio_c=3.0, loss_agg_mode="token-mean", beta=0.0, kl_type="k3", norm_len=R,
                            is_correction="none", is_cap=2.0)
    guard = StepGuard(max_bad_steps=3, zero_stage=0, checkpoint_dir="unused")
    guard.start_step()
    tally = ppo_update(engines[1], rollout_batch(), settings, guard)
    # rows (columns, head positions): 0 (1 pad + 2 + 5, 6), 1 (3 + 2, 3), 2 (3 + 4, 5), 3 (3 + 1, 2); two epochs
    assert (tally.seq_tokens, tally.head_tokens) == (2 * (7 + 5 + 7 + 4), 2 * (6 + 3 + 5 + 2))
    assert tally.seconds > 0
    roofline = UpdateRoofline(body_params=1000.0, head_params=500.0, peak_flops=1e9)
    metrics = update_roofline_metrics(roofline, tally)
    expected = update_flops(1000.0, 500.0, 46, 32) / tally.seconds
    assert metrics["perf/actor_flops_per_s"] == pytest.approx(expected)
    assert metrics["perf/mfu/actor"] == pytest.approx(expected / 1e9)
