"""Where a rollout's tensors live when the actor is on a GPU: the token tensors on the actor's device, the
per-response rows (group ids, like the scores and turn scores) on the CPU, where the advantage maths mixes them.

Found on the first CUDA run (benchmarks/results/gpu_check.md): group ids followed the tokens to cuda:0 while the
scores stayed on the CPU, and every method's first step died in rl/advantages/stats.py's index_add. CPU tests could
not see it (everything is on the CPU there); here the "meta" device stands in for the GPU.
"""
from types import SimpleNamespace

import torch

from rl.rollout.episodes import _layout


def test_row_metadata_stays_on_the_cpu_when_the_tokens_go_to_the_actors_device():
    tok = SimpleNamespace(pad_token_id=0)
    prompts = [[5, 6], [7]]
    segments = [[([11, 12], 0)], [([13], 0), ([14, 15], 1)]]
    batch = _layout(tok, prompts, segments, torch.zeros(2, 2), ["a", "b"], [{}, {}], torch.tensor([3, 3]),
                    torch.device("meta"))
    for name in ("input_ids", "attention_mask", "response_mask", "turn_ids"):
        assert getattr(batch, name).device.type == "meta", name
    assert batch.group_ids.device.type == "cpu" and batch.group_ids.tolist() == [3, 3]
    assert batch.turn_scores.device.type == "cpu"
