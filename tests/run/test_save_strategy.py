"""--save_strategy: a try costs what the user chose (steps: checkpoints and the final export; final: only the HF
export; no: nothing but metrics and logs)."""
import os

import pytest

from rl.config import parse_args
from rl.run.start import OutputSettings
from tests.train.test_train_deepspeed import TINY_RUN, assert_ok
from tests.helpers import run_train_in_process


def settings(tiny_model_dir, tmp_path, *flags):
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path), "--dtype", "fp32",
                       *flags])
    return OutputSettings.from_args(args)


@pytest.mark.parametrize("strategy,checkpoints,final_export", [("steps", True, True), ("final", False, True),
                                                               ("no", False, False)])
def test_each_strategy_keeps_what_it_says(tiny_model_dir, tmp_path, strategy, checkpoints, final_export):
    out = settings(tiny_model_dir, tmp_path, "--save_strategy", strategy)
    assert (out.checkpoints, out.final_export) == (checkpoints, final_export)


def test_final_without_the_final_export_is_refused_by_name(tiny_model_dir, tmp_path):
    with pytest.raises(SystemExit, match="--save_strategy no to save nothing"):
        settings(tiny_model_dir, tmp_path, "--save_strategy", "final", "--no_final_export")


@pytest.mark.slow
def test_a_final_only_run_writes_the_model_and_no_checkpoint(tiny_model_dir, tmp_path):
    out = str(tmp_path)
    assert_ok(run_train_in_process(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *TINY_RUN,
                                    "--max_steps", "1", "--save_strategy", "final"]))
    assert os.path.exists(os.path.join(out, "final", "config.json"))
    assert not os.path.exists(os.path.join(out, "checkpoints"))
