"""--top_entropy_quantile (rl/update/top_entropy.py): TRL's high-entropy mask on fixed tensors, thresholds per
mini-batch, and the update in which only those tokens carry the policy gradient (denominators unchanged)."""
import types

import pytest
import torch

from rl.rollout.sampling_signals import SamplingSignals
from rl.update.ppo import LossSettings, ppo_update
from rl.update.top_entropy import (high_entropy_mask, mini_batch_entropy_masks, quantile, rollout_entropy,
                                   sorted_quantile)
from tests.update.test_mini_batches import AccumulatingEngine, guard, rollout

ENTROPY = torch.tensor([[0.1, 0.9, 0.5], [0.3, 2.0, 7.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # the 7.0 is padding: it must not move the threshold


def trl_high_entropy_mask(entropies, mask, threshold):
    """TRL's GRPOTrainer.get_high_entropy_mask on one process (trl/trainer/grpo_trainer.py), for comparison."""
    entropy_threshold = torch.quantile(entropies[mask.bool()].float(), threshold)
    return ((entropies * mask.float()) >= entropy_threshold) & mask.bool()


@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_quantile_is_torchs_linear_interpolation(n):
    values = torch.rand(n, generator=torch.Generator().manual_seed(n))
    for q in (0.0, 0.2, 0.5, 0.8, 1.0):
        assert quantile(values, q).item() == torch.quantile(values, q).item()
        # the path taken past torch.quantile's 2^24 elements: the same up to float rounding
        assert sorted_quantile(values, q).item() == pytest.approx(torch.quantile(values, q).item(), rel=1e-6)


def test_the_mask_keeps_the_top_q_of_the_response_tokens_as_trl_does():
    # sorted response entropies 0.1 0.3 0.5 0.9 2.0; q = 0.4 keeps those >= the 0.6 quantile, 0.5 + 0.4 x 0.4 = 0.66
    keep, threshold = high_entropy_mask(ENTROPY, MASK, 0.4)
    assert threshold == pytest.approx(0.66)
    assert keep.tolist() == [[False, True, False], [False, True, False]]
    for q in (0.0, 0.2, 0.4, 0.5, 1.0):
        assert torch.equal(high_entropy_mask(ENTROPY, MASK, q)[0], trl_high_entropy_mask(ENTROPY, MASK, 1 - q)), q
    assert high_entropy_mask(ENTROPY, MASK, 0.0)[0].sum() == 1   # only the highest
    assert torch.equal(high_entropy_mask(ENTROPY, MASK, 1.0)[0], MASK.bool())  # every response token


def test_each_mini_batch_gets_its_own_threshold():
    """Two mini-batches of two rows: the first's entropies are all higher than the second's; each keeps its own top
    half (a batch-wide threshold would leave the second mini-batch without a token)."""
    batch = rollout([[1, 1], [1, 1], [1, 1], [1, 1]], [1.0, 1.0, 1.0, 1.0])
    batch.signals = SamplingSignals(entropy=torch.tensor([[5.0, 6.0], [7.0, 8.0], [0.1, 0.2], [0.3, 0.4]]))
    keep, threshold = mini_batch_entropy_masks(None, batch, torch.arange(4).view(2, 2), 0.5, 1.0, 2)
    assert keep.tolist() == [[False, False], [True, True], [False, False], [True, True]]
    assert threshold == pytest.approx((6.5 + 0.25) / 2)


class BigramLM(torch.nn.Module):
    """log pi(y | ..., x) = T[x, y] - logsumexp(T[x]): the entropy differs with the previous token."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor([[0.0, 0.0, 0.0], [3.0, 0.0, -1.0], [0.5, 0.2, 0.0]]))

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
        keep = logits_to_keep or input_ids.shape[1]
        return types.SimpleNamespace(logits=self.table[input_ids[:, -keep:]])


RESPONSES, ADVANTAGES = [[1, 1, 2], [2, 0], [0, 1], [1]], [1.0, -1.0, 0.5, -0.5]


def test_only_high_entropy_tokens_carry_the_gradient_and_the_denominator_stays():
    model = BigramLM()
    batch = rollout(RESPONSES, ADVANTAGES)
    entropy = rollout_entropy(model, batch, 1.0, 2)  # no signals recorded: one no-grad forward
    keep, _ = high_entropy_mask(entropy, batch.response_mask, 0.5)
    assert 0 < keep.sum() < batch.response_mask.sum()
    # by hand: on-policy (ratio 1) token-mean over all 8 tokens of -A x logp, on the kept tokens only
    logits = model.table[batch.input_ids[:, :-1]]
    logp = torch.log_softmax(logits, -1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    adv = torch.tensor(ADVANTAGES)[:, None]
    expected = torch.autograd.grad((-adv * logp * keep).sum() / batch.response_mask.sum(), model.table)[0]

    s = LossSettings(micro=2, ppo_epochs=1, temperature=1.0, clip_ratio_low=0.2, clip_ratio_high=0.2,
                     clip_ratio_c=3.0, loss_agg_mode="token-mean", beta=0.0, kl_type="k3", norm_len=3,
                     is_correction="none", is_cap=2.0, top_entropy_quantile=0.5)
    g = guard()  # keeps each optimizer step's gradient
    metrics = ppo_update(AccumulatingEngine(model, torch.optim.SGD(model.parameters(), lr=0.0), gas=2), batch, s, g)
    assert torch.allclose(g.grads[0], expected.flatten(), atol=1e-6)
    assert metrics.metrics(with_kl=False)["actor/entropy_threshold"] == pytest.approx(
        quantile(entropy[batch.response_mask.bool()], 0.5).item())


def test_bad_quantile_is_refused_naming_the_flag(tiny_model_dir):
    from rl.config import parse_args
    with pytest.raises(SystemExit, match="--top_entropy_quantile"):
        parse_args(["--model_name_or_path", tiny_model_dir, "--top_entropy_quantile", "1.5"])
