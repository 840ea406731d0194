"""rl/eval/judge.py and eval.py --judge_model: pairwise judging in both orders, win / tie / loss with Wilson intervals."""
import json

import pytest
import torch

from rl.eval.judge import Judge, judge_results, pair_outcome, rates, wilson_interval
from tests.helpers import build_tiny_model
from tests.eval.test_eval_cli import eval_in_process


def test_a_response_wins_only_when_preferred_in_both_orders():
    assert pair_outcome(True, True) == "win" and pair_outcome(False, False) == "loss"
    # a judge that always picks the first (or the second) position gives ties: position bias cancels
    assert pair_outcome(True, False) == "tie" and pair_outcome(False, True) == "tie"


def test_wilson_interval_matches_the_textbook_values():
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(0, 0) == (0.0, 1.0)
    r = rates(["win", "win", "tie", "loss"])
    assert (r["judge/win"], r["judge/tie"], r["judge/loss"], r["judge/pairs"]) == (0.5, 0.25, 0.25, 4)
    assert r["judge/win_ci_low"] < 0.5 < r["judge/win_ci_high"]


@pytest.fixture(scope="module")
def tiny_judge(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    return Judge(AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir))


def test_swapping_run_and_baseline_swaps_win_and_loss(tiny_judge):
    question = "What is 2 + 3?"
    pairs = [("5", "seven"), ("the answer is 5", "6"), ("\\boxed{5}", "I do not know")]
    mirror = {"win": "loss", "loss": "win", "tie": "tie"}
    for x, y in pairs:
        assert tiny_judge.compare(question, y, x) == mirror[tiny_judge.compare(question, x, y)]
    assert tiny_judge.compare(question, "5", "5") == "tie"
    margin = tiny_judge.margin(question, "5", "seven")
    assert isinstance(margin, float) and torch.isfinite(torch.tensor(margin))


def test_problems_are_matched_by_id_and_unmatched_ones_counted(tiny_judge):
    run = [{"id": 0, "responses": [["5"]]}, {"id": 1, "responses": [["7"]]}, {"id": 9, "responses": [["1"]]}]
    base = [{"id": 1, "responses": [["7"]]}, {"id": 0, "responses": [["5"]]}]
    out = judge_results(tiny_judge, {"0": "2+3?", "1": "3+4?", "9": "0+1?"}, run, base)
    assert out["judge/pairs"] == 2 and out["judge/unmatched"] == 1 and out["judge/tie"] == 1.0


@pytest.mark.slow
def test_eval_judges_a_checkpoint_against_a_baseline_results_file(tiny_model_dir, tmp_path, capsys):
    other_model = build_tiny_model(str(tmp_path / "other_model"), seed=1)
    common = ["--env", "arith", "--limit", "6", "--max_new_tokens", "6"]
    base = eval_in_process(["--model_name_or_path", other_model, *common, "--output_dir", str(tmp_path / "base")],
                           capsys)
    assert base.returncode == 0, base.stderr[-3000:]
    judged = eval_in_process(["--model_name_or_path", tiny_model_dir, *common, "--output_dir", str(tmp_path / "run"),
                              "--compare", str(tmp_path / "base" / "results.json"), "--judge_model", tiny_model_dir],
                             capsys)
    assert judged.returncode == 0, judged.stderr[-3000:]
    judge = json.loads((tmp_path / "run" / "results.json").read_text())["judge"]
    assert judge["judge/pairs"] == 6 and judge["judge/unmatched"] == 0
    assert judge["judge/win"] + judge["judge/tie"] + judge["judge/loss"] == pytest.approx(1.0)
    assert "judge (this run vs --compare): win" in judged.stdout
    # the baseline judged against its own results: identical responses, only ties
    itself = eval_in_process(["--model_name_or_path", other_model, *common, "--output_dir", str(tmp_path / "self"),
                              "--compare", str(tmp_path / "base" / "results.json"), "--judge_model", tiny_model_dir],
                             capsys)
    assert itself.returncode == 0, itself.stderr[-3000:]
    assert json.loads((tmp_path / "self" / "results.json").read_text())["judge"]["judge/tie"] == 1.0


def test_judge_without_a_baseline_is_refused(tiny_model_dir, capsys):
    proc = eval_in_process(["--model_name_or_path", tiny_model_dir, "--judge_model", tiny_model_dir, "--limit", "1"],
                           capsys)
    assert proc.returncode != 0 and "pass its results.json with --compare" in proc.stderr
