"""--save_model_only_steps: HF model-only exports between full checkpoints, loadable by from_pretrained."""
import json
import os

import pytest
import torch

from tests.helpers import run_train_in_process
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok, load_params

pytestmark = pytest.mark.slow


def test_model_only_exports_land_between_full_checkpoints_and_load(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    assert_ok(run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *TINY_RUN,
                                    "--max_steps", "3", "--save_model_only_steps", "2", "--save_steps", "0",
                                    "--no_final_export"]))
    assert sorted(os.listdir(os.path.join(out, "hf"))) == ["step_2"]  # the last step gets the full save instead
    assert sorted(n for n in os.listdir(os.path.join(out, "checkpoints")) if n.startswith("step_")) == ["step_3"]
    exported, initial = load_params(os.path.join(out, "hf", "step_2")), load_params(tiny_model_dir)
    assert exported.keys() == initial.keys()
    assert any(not torch.equal(exported[k], initial[k]) for k in initial)  # the trained weights, not the start
    assert not any(name.endswith((".pt", ".tmp")) for name in os.listdir(os.path.join(out, "hf", "step_2")))
    # the run encoded its prompts with left truncation and padding; the export's tokenizer carries neither
    with open(os.path.join(out, "hf", "step_2", "tokenizer.json")) as f:
        saved = json.load(f)
    assert saved["truncation"] is None and saved["padding"] is None
