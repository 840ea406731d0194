"""rl/update/batching.py: length-sorted, trimmed micro-batches change no result, only the padding computed."""
import pytest
import torch

from rl.update.batching import batched_response_logprobs, micro_batches, response_logprobs
from rl.update.loss import policy_loss
from rl.rollout.tokens import left_pad


def _batch(seed=0):
    """8 rows: prompts of 1-5 tokens (left-padded), responses of 1-7 tokens (right-padded)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(4, 60, (int(n),), generator=g).tolist() for n in torch.randint(1, 6, (8,), generator=g)]
    ids, mask = left_pad(prompts, 0, "cpu")
    lengths = torch.randint(1, 8, (8,), generator=g)
    resp = torch.randint(4, 60, (8, int(lengths.max())), generator=g)
    resp_mask = (torch.arange(resp.shape[1])[None] < lengths[:, None]).long()
    return torch.cat([ids, resp * resp_mask], 1), torch.cat([mask, resp_mask], 1), ids.shape[1], resp_mask.float()


def test_micro_batches_cover_every_row_once_and_drop_only_padding():
    input_ids, attention_mask, p, resp_mask = _batch()
    mbs = micro_batches(attention_mask, p, micro=3)
    assert [len(mb.rows) for mb in mbs] == [3, 3, 2]
    assert sorted(torch.cat([mb.rows for mb in mbs]).tolist()) == list(range(8))
    for mb in mbs:
        ids, mask = mb.sequences(input_ids, attention_mask)
        assert mask.sum() == attention_mask[mb.rows].sum()  # every real token kept
        assert mb.response(resp_mask).sum() == resp_mask[mb.rows].sum()
    # sorted by length: the shortest responses share the first micro-batch, which is narrower than the batch
    assert mbs[0].resp_len < mbs[-1].resp_len == resp_mask.shape[1]


def test_trimmed_log_probs_and_gradients_equal_the_whole_padded_batch(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    input_ids, attention_mask, p, resp_mask = _batch(seed=1)
    full, _ = response_logprobs(model, input_ids, attention_mask, p, temperature=0.7)
    trimmed = batched_response_logprobs(model, input_ids, attention_mask, p, temperature=0.7, micro=3)
    torch.testing.assert_close(trimmed * resp_mask, full.detach() * resp_mask, rtol=1e-4, atol=1e-5)

    adv = torch.linspace(-1, 1, 8)[:, None].expand_as(resp_mask)
    tokens = float(resp_mask.sum())

    def grads(micro):
        model.zero_grad()
        for mb in micro_batches(attention_mask, p, micro):
            logp, _ = response_logprobs(model, *mb.sequences(input_ids, attention_mask), mb.prompt_len, 0.7)
            loss, _ = policy_loss(logp, logp.detach(), mb.response(adv), mb.response(resp_mask), 0.2, 0.28, 3.0,
                                  "token-mean", num_tokens=tokens)
            loss.backward()
        return torch.cat([q.grad.flatten() for q in model.parameters()])

    torch.testing.assert_close(grads(3), grads(8), rtol=1e-4, atol=1e-6)


def test_each_micro_batch_carries_its_own_rows_advantages_and_log_probs():
    """Rows are reordered by length: every per-row tensor must follow its row (response- and turn-level)."""
    from rl.types import Rollout
    input_ids, attention_mask, p, resp_mask = _batch(seed=2)
    n, r = resp_mask.shape
    turn_ids = torch.where(resp_mask.bool(), (torch.arange(r) >= 3).long().expand(n, r), -1)
    batch = Rollout(input_ids=input_ids, attention_mask=attention_mask, response_mask=resp_mask, prompt_len=p,
                    group_ids=torch.arange(n), completions=[""] * n, samples=[{}] * n, turn_ids=turn_ids,
                    old_logp=torch.arange(n * r, dtype=torch.float).view(n, r))
    for advantages in (torch.arange(n, dtype=torch.float) + 1,                           # one per response
                       torch.stack([torch.arange(n) + 1.0, -(torch.arange(n) + 1.0)], 1)):  # one per turn
        batch.advantages = advantages
        seen = set()
        for mb in micro_batches(attention_mask, p, micro=3):
            part = mb.of(batch)
            for j, row in enumerate(mb.rows.tolist()):
                seen.add(row)
                want = batch.token_advantages(slice(row, row + 1))[0, :mb.resp_len]
                assert torch.equal(part.advantages[j], want), (row, part.advantages[j], want)
                assert torch.equal(part.old_logp[j], batch.old_logp[row, :mb.resp_len])
                assert torch.equal(part.response_mask[j], resp_mask[row, :mb.resp_len])
                assert part.ref_logp is None and part.rollout_logp is None
        assert seen == set(range(n))


def test_kept_rows_fill_the_same_number_of_micro_batches_and_no_other_row_is_computed():
    _, attention_mask, p, _ = _batch()
    keep = torch.tensor([1, 0, 0, 1, 1, 0, 1, 0], dtype=torch.bool)
    mbs = micro_batches(attention_mask, p, micro=3, keep=keep)
    assert len(mbs) == 3 and sorted(len(mb.rows) for mb in mbs) == [1, 1, 2]
    assert sorted(torch.cat([mb.rows for mb in mbs]).tolist()) == [0, 3, 4, 6]
    # fewer kept rows than micro-batches: every micro-batch still gets one (ZeRO-3 ranks run the same forwards)
    one = micro_batches(attention_mask, p, micro=3, keep=torch.tensor([0, 0, 0, 0, 0, 1, 0, 0], dtype=torch.bool))
    assert len(one) == 3 and all(len(mb.rows) == 1 for mb in one)
    assert 5 in torch.cat([mb.rows for mb in one]).tolist()


def test_kept_rows_fill_the_micro_batches_asked_for_and_no_fewer_than_they_need():
    _, attention_mask, p, _ = _batch()
    keep = torch.tensor([1, 0, 0, 1, 1, 0, 1, 0], dtype=torch.bool)
    two = micro_batches(attention_mask, p, micro=3, keep=keep, count=2)
    assert [len(mb.rows) for mb in two] == [2, 2]
    assert sorted(torch.cat([mb.rows for mb in two]).tolist()) == [0, 3, 4, 6]
    for count in (1, 4):  # 4 kept rows do not fit one micro-batch of 3; 8 rows of 3 make at most 3
        with pytest.raises(ValueError, match="micro_batches"):
            micro_batches(attention_mask, p, micro=3, keep=keep, count=count)
