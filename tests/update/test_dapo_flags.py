"""The DAPO flags (rl/rollout/dynamic_sampling.py, rl/update/length_shaping.py): in --help-all with their defaults, and every combination credo cannot make correct
refused at parse time naming the flag."""
import subprocess
import sys

import pytest

from rl.config import parse_args
from tests.helpers import REPO_ROOT


def test_help_lists_the_dapo_flags_with_their_defaults():
    out = subprocess.run([sys.executable, "train.py", "--help-all"], cwd=REPO_ROOT, capture_output=True, text=True,
                         check=True).stdout  # --help shows the common flags only; --help-all every group
    flat = " ".join(out.split())
    for flag in ("--filter_groups", "--filter_groups_metric", "--filter_groups_max_rounds", "--overlong_buffer_len",
                 "--overlong_penalty_factor", "--mask_truncated_completions"):
        assert flag in out, flag
    assert "max_num_gen_batches; the DAPO recipe's 10); a step" in flat and "0 = no cap (default: 10)" in flat
    assert "--overlong_buffer_len" in flat and "0 = off (default: 0)" in flat


@pytest.mark.parametrize("argv,fragment", [
    (["--filter_groups", "--algo", "tcpo", "--max_turns", "2"], "--filter_groups with --algo tcpo"),
    (["--filter_groups", "--algo", "mt_grpo", "--max_turns", "2"], "--filter_groups with --algo mt_grpo"),
    (["--filter_groups", "--algo", "maestro"], "--filter_groups with --algo maestro"),
    (["--filter_groups", "--filter_groups_max_rounds", "-1"], "--filter_groups_max_rounds must be >= 0"),
    (["--filter_groups_max_rounds", "3"], "add --filter_groups"),
    (["--filter_groups_metric", "correctness"], "add --filter_groups"),
    (["--overlong_buffer_len", "40", "--max_answer_seq_len", "32"], "--overlong_buffer_len 40 is longer"),
    (["--overlong_buffer_len", "-1"], "--overlong_buffer_len must be >= 0"),
    (["--overlong_penalty_factor", "0.5"], "add --overlong_buffer_len"),
    (["--overlong_buffer_len", "8", "--overlong_penalty_factor", "-1"], "--overlong_penalty_factor must be >= 0"),
    (["--overlong_buffer_len", "8", "--max_turns", "2"], "use --mask_truncated_completions instead"),
    (["--overlong_buffer_len", "8", "--algo", "gdpo", "--reward_funcs", "correctness,length"],
     "--overlong_buffer_len with --algo gdpo"),
])
def test_combinations_dapo_cannot_serve_are_refused(argv, fragment, tiny_model_dir, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--model_name_or_path", tiny_model_dir, *argv])
    assert fragment in str(exc.value) + capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--filter_groups", "--algo", "gdpo", "--reward_funcs", "correctness,length"],
    ["--filter_groups", "--filter_groups_metric", "reward_sum", "--algo", "dara", "--reward_funcs", "correctness,length"],
    ["--filter_groups", "--filter_groups_metric", "correctness", "--max_turns", "3"],  # trajectory scores
    ["--filter_groups", "--filter_groups_max_rounds", "0", "--overlong_buffer_len", "32", "--max_answer_seq_len", "32"],
    ["--mask_truncated_completions", "--algo", "tcpo", "--max_turns", "2"],
])
def test_combinations_dapo_serves_are_accepted(argv, tiny_model_dir):
    parse_args(["--model_name_or_path", tiny_model_dir, *argv])
