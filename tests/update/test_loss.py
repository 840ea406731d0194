import math

import pytest
import torch

from rl.update.loss import agg_loss, kl_penalty, policy_loss


def test_token_mean_and_seq_means_follow_verl():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx((6 / 3 + 4 / 3) / 2)
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm", norm_len=10).item() == pytest.approx((0.6 + 0.4) / 2)


def test_microbatch_denominators_reproduce_the_whole_batch():
    torch.manual_seed(0)
    loss = torch.rand(4, 5)
    mask = (torch.rand(4, 5) > 0.3).long()
    mask[:, 0] = 1
    whole = agg_loss(loss, mask, "token-mean")
    total = float(mask.sum())
    parts = sum(agg_loss(loss[i:i + 2], mask[i:i + 2], "token-mean", num_tokens=total) for i in (0, 2))
    assert parts.item() == pytest.approx(whole.item())


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="loss_agg_mode"):
        agg_loss(torch.ones(1, 1), torch.ones(1, 1), "sum")


def test_kl_estimators():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    d = math.log(0.5) - math.log(0.25)
    assert kl_penalty(logp, ref, "k1").item() == pytest.approx(d)
    assert kl_penalty(logp, ref, "k2").item() == pytest.approx(0.5 * d * d)
    assert kl_penalty(logp, ref, "k3").item() == pytest.approx(math.exp(-d) + d - 1)
    assert kl_penalty(ref, ref, "k3").item() == 0.0


def _one_token(ratio, adv, **kw):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    old = torch.zeros(1, 1)
    loss, stats = policy_loss(logp, old, torch.tensor([[adv]]), torch.ones(1, 1), **kw)
    loss.backward()
    return loss.item(), logp.grad.item(), stats


def test_positive_advantage_is_clipped_above_one_plus_eps_high():
    loss, grad, stats = _one_token(1.5, 1.0, clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert loss == pytest.approx(-1.28)
    assert grad == 0.0  # clipped: no gradient pushes the ratio further
    assert stats["clipfrac"].item() == 1.0
    loss, grad, _ = _one_token(1.1, 1.0, clip_ratio_low=0.2, clip_ratio_high=0.28)
    assert loss == pytest.approx(-1.1) and grad == pytest.approx(-1.1)


def test_negative_advantage_is_clipped_below_one_minus_eps_low():
    loss, grad, _ = _one_token(0.5, -1.0, clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert loss == pytest.approx(0.8) and grad == 0.0


def test_dual_clip_caps_the_loss_of_negative_advantages():
    loss, grad, stats = _one_token(5.0, -2.0, clip_ratio_c=3.0)
    assert loss == pytest.approx(6.0)  # min(-A * c, max(-A r, -A clip(r))) = min(6, 10)
    assert grad == 0.0
    assert stats["clipfrac_lower"].item() == 1.0
    loss, _, _ = _one_token(2.0, -2.0, clip_ratio_c=3.0)
    assert loss == pytest.approx(4.0)  # below the cap: the ordinary clipped loss


def test_kl_term_is_added_with_beta():
    logp = torch.zeros(1, 2, requires_grad=True)
    ref = torch.full((1, 2), -1.0)
    adv = torch.zeros(1, 2)
    loss, stats = policy_loss(logp, logp.detach(), adv, torch.ones(1, 2), ref_logp=ref, beta=0.1, kl_type="k1")
    assert loss.item() == pytest.approx(0.1)
    assert stats["kl"].item() == pytest.approx(1.0)


def test_truncated_is_weights_are_capped_and_detached():
    from rl.update.loss import truncated_is_weights
    old = torch.tensor([[-1.0, -1.0, -3.0]], requires_grad=True)
    sampler = torch.tensor([[-1.0, -2.0, -1.0]])
    w = truncated_is_weights(old, sampler, cap=2.0)
    assert w.tolist()[0] == pytest.approx([1.0, 2.0, math.exp(-2.0)])  # exp(1) = 2.72 is capped at 2
    assert not w.requires_grad


def test_is_weights_scale_each_tokens_surrogate():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0]])
    mask = torch.ones(1, 2)
    plain, _ = policy_loss(logp, logp.detach(), adv, mask)
    ones, _ = policy_loss(logp, logp.detach(), adv, mask, is_weights=torch.ones(1, 2))
    assert ones.item() == pytest.approx(plain.item())
    half, _ = policy_loss(logp, logp.detach(), adv, mask, is_weights=torch.tensor([[0.5, 1.5]]))
    assert half.item() == pytest.approx((-0.5 - 1.5) / 2)
    half.backward()
    assert logp.grad.tolist()[0] == pytest.approx([-0.25, -0.75])  # d/dlogp of -w * ratio / 2 at ratio 1
