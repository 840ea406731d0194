"""perf/mfu/actor's parts (rl/log/step_metrics.py, rl/engine/hardware.py): the model's FLOP shape counts every
matmul weight once and the embedding lookup not at all, and one rank's peak is the kept probe's share of the cores."""
import json
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rl.engine import hardware
from rl.log.step_metrics import flop_shape, update_flops

V, D, MLP, LAYERS = 64, 16, 32, 2


def tiny(tied: bool):
    config = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=MLP, num_hidden_layers=LAYERS,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied)
    return LlamaForCausalLM(config)


@pytest.mark.parametrize("tied", [True, False])
def test_the_body_is_every_parameter_but_the_embedding_and_the_head(tied):
    model = tiny(tied)
    per_layer = D * D + 2 * D * (D // 2) + D * D + 3 * D * MLP + 2 * D  # q, k and v (1 kv head), o, MLP, 2 norms
    body, head = flop_shape(model)
    assert body == LAYERS * per_layer + D  # the final norm
    assert head == D * V
    assert sum(p.numel() for p in model.parameters()) == body + (1 if tied else 2) * V * D


def test_update_flops_are_six_per_parameter_and_token():
    assert update_flops(100, 10, seq_tokens=7, head_tokens=3) == 6 * 100 * 7 + 6 * 10 * 3


def test_a_ranks_peak_is_the_best_kept_probes_share_of_its_threads(monkeypatch, tmp_path):
    """One record per thread setting is kept; one measured under load (here the 1-thread one) is no peak."""
    machine = {"cpu": "C", "torch": "T", "bf16_isa": "avx512_bf16", "kernel_env": {"ONEDNN_MAX_CPU_ISA": None}}
    own = {**machine, "fp32_gflops": 100.0, "bf16_gflops": 300.0, "threads": 4}
    kept = {"loaded": {**machine, "fp32_gflops": 10.0, "bf16_gflops": 30.0, "threads": 1},
            "other_kernels": {**machine, "kernel_env": {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "fp32_gflops": 90.0,
                              "bf16_gflops": 900.0, "threads": 1},
            "unlabelled": {**{k: v for k, v in machine.items() if k != "kernel_env"}, "fp32_gflops": 90.0,
                           "bf16_gflops": 900.0, "threads": 1},
            "quiet": {**machine, "fp32_gflops": 40.0, "bf16_gflops": 60.0, "threads": 1}}
    for name, record in kept.items():
        (tmp_path / f"bf16_probe-{name}.json").write_text(json.dumps(record))
    monkeypatch.setenv("CREDO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(hardware, "measured_bf16_speedup", lambda: own)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert hardware.peak_flops(torch.float32, "cpu") == pytest.approx(2 * 40e9)   # the quiet 1-thread probe
    assert hardware.peak_flops(torch.bfloat16, "cpu") == pytest.approx(2 * 75e9)  # the own 4-thread one
    assert math.isnan(hardware.peak_flops(torch.float16, "cpu"))  # not probed on a CPU: no MFU rather than a guess


def test_a_zero3_partitioned_model_counts_its_whole_parameters():
    """Under ZeRO-3 a rank holds a slice of each parameter (numel() is 0 outside a gather): the shape comes from
    DeepSpeed's ds_numel, the same as the whole model's."""
    from tests.helpers import one_rank_process_group
    with one_rank_process_group():
        import deepspeed
        whole = flop_shape(tiny(tied=False))
        with deepspeed.zero.Init(config_dict_or_path={"train_micro_batch_size_per_gpu": 1,
                                                      "zero_optimization": {"stage": 3}}):
            model = tiny(tied=False)
        assert all(p.numel() == 0 for p in model.parameters())
        assert flop_shape(model) == whole
