"""--mask_truncated_completions and --overlong_buffer_len on a rollout (rl/update/length_shaping.py): truncated responses
weigh nothing in the loss, and the penalty lands on the scalar reward."""
import argparse

import torch

from rl.update.length_shaping import LengthSettings, mask_truncated, punish_overlong
from rl.update.loss import policy_loss
from rl.types import Rollout

EOS = 3


def _settings(**kw):
    base = dict(max_answer_seq_len=4, overlong_buffer_len=0, overlong_penalty_factor=1.0,
                mask_truncated_completions=False)
    return LengthSettings.from_args(argparse.Namespace(**{**base, **kw}))


def _rollout():
    """Four single-turn rows of a 4-token budget: rows 1 and 3 end without EOS."""
    response = torch.tensor([[5, EOS, 0, 0], [5, 6, 7, 8], [5, 6, EOS, 0], [8, 7, 6, 5]])
    turn_ids = torch.tensor([[0, 0, -1, -1], [0, 0, 0, 0], [0, 0, 0, -1], [0, 0, 0, 0]])
    prompt = torch.full((4, 2), 9)
    return Rollout(input_ids=torch.cat([prompt, response], 1),
                   attention_mask=torch.cat([torch.ones(4, 2, dtype=torch.long), (turn_ids >= 0).long()], 1),
                   response_mask=(turn_ids >= 0).float(), prompt_len=2, group_ids=torch.zeros(4, dtype=torch.long),
                   completions=[""] * 4, samples=[{}] * 4, turn_ids=turn_ids,
                   scores=torch.tensor([1.0, 1.0, 0.0, 0.0]))


def test_masked_truncated_completions_contribute_nothing_to_the_loss():
    batch = mask_truncated(_rollout(), _settings(mask_truncated_completions=True), [EOS])
    assert batch.response_mask.sum(1).tolist() == [2.0, 0.0, 3.0, 0.0]
    torch.manual_seed(0)
    logp = torch.randn(4, 4, requires_grad=True)
    old = logp.detach() + 0.1 * torch.randn(4, 4)
    adv = torch.tensor([1.0, 50.0, -1.0, -50.0])[:, None].expand(4, 4)  # huge advantages on the truncated rows
    loss, _ = policy_loss(logp, old, adv, batch.response_mask, loss_agg_mode="token-mean")
    loss.backward()
    assert logp.grad[[1, 3]].abs().sum() == 0
    kept = [0, 2]
    alone, _ = policy_loss(logp[kept].detach(), old[kept], adv[kept], batch.response_mask[kept],
                           loss_agg_mode="token-mean")
    assert torch.allclose(loss.detach(), alone)  # as if the truncated rows were never sampled


def test_without_the_flag_every_row_keeps_its_mask():
    batch = mask_truncated(_rollout(), _settings(), [EOS])
    assert batch.response_mask.sum(1).tolist() == [2.0, 4.0, 3.0, 4.0]


def test_overlong_penalty_is_added_to_the_scalar_reward():
    # budget 4, buffer 2: lengths 2, 4, 3, 4 -> penalties 0, -1, -0.5, -1
    batch = punish_overlong(_rollout(), _settings(overlong_buffer_len=2))
    assert batch.scores.tolist() == [1.0, 0.0, -0.5, -1.0]
