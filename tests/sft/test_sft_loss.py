"""rl/sft/loss.py: the NLL of the trained tokens, whatever the padding or packing around them."""
import pytest
import torch
import torch.nn.functional as F

from rl.sft.examples import pack
from rl.sft.loss import collate, token_nll_sum


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return m.eval()


def _example(seed: int, n: int, answer: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 90, (n,), generator=g).tolist()
    return {"input_ids": ids, "loss_mask": [0] * (n - answer) + [1] * answer}


def _reference(model, example) -> tuple:
    """Plain cross-entropy of the full forward at the trained positions (no logits_to_keep, no position ids)."""
    ids = torch.tensor([example["input_ids"]])
    logits = model(input_ids=ids).logits[0, :-1].float()
    mask = torch.tensor(example["loss_mask"][1:], dtype=torch.bool)
    return F.cross_entropy(logits[mask], ids[0, 1:][mask], reduction="sum"), int(mask.sum())


@torch.no_grad()
def test_nll_is_the_cross_entropy_of_the_trained_tokens_only(model):
    examples = [_example(0, 20, 6), _example(1, 13, 4)]  # different lengths: the second is right-padded
    nll, count = token_nll_sum(model, collate(examples, pad_token_id=0))
    ref = [_reference(model, e) for e in examples]
    assert count.item() == sum(c for _, c in ref) == 10
    assert nll.item() == pytest.approx(sum(n.item() for n, _ in ref), rel=1e-5)


@torch.no_grad()
def test_packed_examples_do_not_see_each_other(model):
    examples = [_example(2, 18, 5), _example(3, 11, 3), _example(4, 9, 9)]
    rows = pack(examples, max_len=40)
    assert len(rows) == 1  # all three share one row
    nll, count = token_nll_sum(model, collate(rows, pad_token_id=0))
    ref = [_reference(model, e) for e in examples]
    # The third example's first token is trained but has no context: counted nowhere (8 of its 9).
    assert count.item() == 5 + 3 + 8
    assert nll.item() == pytest.approx(sum(n.item() for n, _ in ref), rel=1e-5)


def test_padding_positions_continue_so_no_real_token_attends_to_a_pad():
    batch = collate([{"input_ids": [7, 8, 9], "loss_mask": [0, 1, 1]}, {"input_ids": [5], "loss_mask": [1]}], 0)
    assert batch["input_ids"].tolist() == [[7, 8, 9], [5, 0, 0]]
    assert batch["position_ids"].tolist() == [[0, 1, 2], [0, 1, 2]]
    assert batch["loss_mask"].tolist() == [[0, 1, 1], [1, 0, 0]]
