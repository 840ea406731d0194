"""The hybrid-engine support check build_actor makes before it asks DeepSpeed for the hybrid engine: models DeepSpeed
0.19.8 cannot serve under transformers 5.x get one warning and gather-and-generate, not garbage rollouts."""
import pytest
from transformers import AutoConfig

import rl.engine.actor
from rl.engine.actor import HYBRID_ENGINE_REFUSED, hybrid_engine_refusal


def test_tiny_llama_is_refused_for_the_tuple_contract_and_grouped_query_attention(tiny_model_dir, monkeypatch):
    config = AutoConfig.from_pretrained(tiny_model_dir)
    assert config.model_type == "llama" and config.num_key_value_heads < config.num_attention_heads
    monkeypatch.setattr(rl.engine.actor, "on_cuda", lambda: True)  # past the CUDA check, to the architecture check
    why = rl.engine.actor._hybrid_engine_fallback_reason(tiny_model_dir)
    assert why == hybrid_engine_refusal(config)
    assert "'llama'" in why and "returns a tuple" in why and "num_kv" in why


@pytest.mark.parametrize("model_type", sorted(HYBRID_ENGINE_REFUSED))
def test_every_refused_type_says_why(model_type):
    class Config:
        pass
    config = Config()
    config.model_type = model_type
    assert HYBRID_ENGINE_REFUSED[model_type] in hybrid_engine_refusal(config)

