"""rl/engine/models.py: a saved tokenizer carries none of the truncation and padding its last batched call set."""
import json
import os

from rl.engine.models import load_tokenizer, save_tokenizer
from rl.rollout.tokens import encode_prompts


def test_a_saved_tokenizer_has_no_leftover_truncation_or_padding_and_keeps_its_own(tiny_model_dir, tmp_path):
    tokenizer = load_tokenizer(tiny_model_dir)
    encode_prompts(tokenizer, [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "a longer one"}]], 16)
    state = (tokenizer._tokenizer.truncation, tokenizer._tokenizer.padding)
    assert state[0]["max_length"] == 16 and state[1] is not None  # what a prompt batch leaves on the backend
    save_tokenizer(tokenizer, str(tmp_path))
    with open(os.path.join(tmp_path, "tokenizer.json")) as f:
        saved = json.load(f)
    assert saved["truncation"] is None and saved["padding"] is None
    assert (tokenizer._tokenizer.truncation, tokenizer._tokenizer.padding) == state  # the run's tokenizer unchanged
    reloaded = load_tokenizer(str(tmp_path))
    assert reloaded("a longer one")["input_ids"] == tokenizer("a longer one")["input_ids"]
