"""RLOO's leave-one-out advantage (rl.advantages.rloo) and `--algo rloo` training under the real launcher."""
import os

import pytest
import torch

from rl.advantages import rloo
from rl.log.loggers import read_metrics
from tests.helpers import run_train
from tests.train.test_train_deepspeed import assert_ok


def leave_one_out_by_hand(scores, group_ids):
    """OpenRLHF's / TRL's formula, one response at a time: r_i minus the mean of the other members of its group."""
    out = []
    for i, (r, g) in enumerate(zip(scores.tolist(), group_ids.tolist())):
        others = [s for j, (s, h) in enumerate(zip(scores.tolist(), group_ids.tolist())) if h == g and j != i]
        out.append(r - sum(others) / len(others) if others else 0.0)
    return torch.tensor(out)


def test_each_response_is_judged_against_the_mean_of_the_others_in_its_group():
    scores = torch.tensor([1.0, 0.0, 0.0, 0.5, 2.0, 2.0, 3.0])
    group_ids = torch.tensor([4, 4, 4, 4, 9, 9, 1])  # ids need not be contiguous; the last group has one member
    adv = rloo(scores, group_ids)
    torch.testing.assert_close(adv, leave_one_out_by_hand(scores, group_ids))
    assert adv[0] == pytest.approx(1.0 - 0.5 / 3)
    assert adv[4] == 0 and adv[5] == 0  # equal rewards: no signal
    assert adv[6] == 0                  # a group of one has no baseline: 0, not r_i


def test_the_advantages_of_a_group_sum_to_zero_and_are_not_std_scaled():
    g = torch.Generator().manual_seed(0)
    scores = torch.rand(32, generator=g) * 10
    group_ids = torch.arange(8).repeat_interleave(4)
    adv = rloo(scores, group_ids)
    torch.testing.assert_close(adv.view(8, 4).sum(1), torch.zeros(8), atol=1e-5, rtol=0)
    mean = scores.view(8, 4).mean(1, keepdim=True)
    torch.testing.assert_close(adv.view(8, 4), (4 / 3 * (scores.view(8, 4) - mean)).float())  # G/(G-1), no 1/std


@pytest.mark.slow
def test_algo_rloo_trains(tiny_model_dir, tmp_path):
    # rloo's one real `deepspeed` launch (one rank), on the CPU default env (arith) at the tiny model's sizes: the
    # method is under test, not the batch size (the defaults are 8 prompts x 4 responses x 32 tokens per step)
    out = str(tmp_path)
    proc = run_train(["--algo", "rloo", "--model_name_or_path", tiny_model_dir, "--output_dir", out,
                      "--max_steps", "2", "--no_final_export", "--actor_learning_rate", "1e-3",
                      "--num_generations", "4", "--per_device_generation_batch_size", "2", "--max_answer_seq_len", "8"],
                     num_ranks=1)
    assert_ok(proc)
    rows = read_metrics(os.path.join(out, "metrics.jsonl"))
    assert len(rows) == 2 and all(row["actor/grad_norm"] is not None for row in rows)
    with open(os.path.join(out, "config.json")) as f:
        assert '"algo": "rloo"' in f.read()
