"""compare.py for a newcomer's own comparison (issue #65 item 5): train.py's own refusal shown, a user's reward module
imported from the repository root, train.py folders already made as arms, one seed reported without a spread, and the
report kept out of the tracked experiments/results/ by default."""
import json
import os
import subprocess
import sys

import pytest

from experiments import compare
from benchmarks.paired import format_paired_row, paired
from tests.helpers import REPO_ROOT


def _run_folder(path, seed, rewards, max_steps=3):
    """A train.py output folder as a finished run leaves it: config.json (its flags) and metrics.jsonl."""
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"flags": {"seed": seed, "max_steps": max_steps, "algo": "grpo"}, "git_commit": "abc" * 13}, f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps({"step": i + 1, "reward/mean": r}) + "\n" for i, r in enumerate(rewards))
    return str(path)


def test_existing_run_folders_are_arms_paired_by_their_seeds(tmp_path):
    a = [_run_folder(tmp_path / f"grpo_{s}", s, [0.1, 0.2 * s]) for s in (1, 2)]
    b = [_run_folder(tmp_path / f"rloo_{s}", s, [0.1, 0.3 * s]) for s in (2, 1)]  # given in another order
    result = compare.main(["--name", "mine", "--runs", f"grpo={','.join(a)}", "--runs", f"rloo={','.join(b)}",
                           "--metric", "last:reward/mean", "--cache_dir", str(tmp_path / "cache")])
    assert result["baseline"] == "grpo" and result["seeds"] == [1, 2]
    assert result["comparisons"]["rloo vs grpo"]["diffs"] == pytest.approx([0.1, 0.2])
    assert [r["run_dir"] for r in result["runs"]["rloo"]] == [b[1], b[0]]
    assert (tmp_path / "cache" / "mine.md").exists()  # not in the tracked experiments/results/
    assert not os.path.exists(os.path.join(REPO_ROOT, "experiments", "results", "mine.md"))


def test_one_seed_reports_no_spread_instead_of_nan(tmp_path):
    row = format_paired_row("b vs a", paired([0.5], [0.25]), digits=2)
    assert "one seed: no spread" in row and "nan" not in row and "0.25" in row
    a, b = _run_folder(tmp_path / "a", 7, [0.5]), _run_folder(tmp_path / "b", 7, [0.75])
    compare.main(["--name", "one", "--runs", f"a={a}", "--runs", f"b={b}", "--metric", "last:reward/mean",
                  "--cache_dir", str(tmp_path / "cache")])
    text = (tmp_path / "cache" / "one.md").read_text()
    assert "one seed: no spread" in text and "nan" not in text


def test_a_folder_arm_without_the_seeds_asked_for_is_refused_naming_them(tmp_path):
    a, b = _run_folder(tmp_path / "a", 1, [0.5]), _run_folder(tmp_path / "b", 2, [0.75])
    with pytest.raises(SystemExit, match="--runs b has no run of seed 1"):
        compare.main(["--name", "x", "--runs", f"a={a}", "--runs", f"b={b}", "--seeds", "1",
                      "--metric", "last:reward/mean", "--cache_dir", str(tmp_path / "cache")])


def test_train_py_s_own_refusal_is_shown_not_a_pointer_to_nothing(tiny_model_dir, tmp_path):
    with pytest.raises(compare.CompareError) as exc:
        compare.resolved_config(["--model_name_or_path", tiny_model_dir, "--reward_funcs", "no_pkg.rewards:judge",
                                 "--output_dir", str(tmp_path)], "--method mine")
    assert "no_pkg" in str(exc.value) and "see the message above" not in str(exc.value)
    with pytest.raises(compare.CompareError, match="did you mean --max_steps"):  # argparse's own, captured
        compare.resolved_config(["--max_step", "3", "--output_dir", str(tmp_path)], "--method mine")


def test_a_user_s_reward_module_imports_from_the_repository_root_as_in_train_py(tiny_model_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # `tests` is no installed package
    proc = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "experiments", "compare.py"), "--name", "p",
                           "--plan", "--seeds", "1", "--metric", "last:reward/mean", "--no_eval",
                           "--cache_dir", str(tmp_path), "--method", "a=--algo grpo", "--method", "b=--algo rloo",
                           "--train_args", f"--model_name_or_path {tiny_model_dir} --reward_funcs "
                                           "correctness,tests.fixture_rewards:prints_then_scores"],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "compare: a seed 1: to run" in proc.stdout
