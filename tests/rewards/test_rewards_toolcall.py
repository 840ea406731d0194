"""BFCL's checker through the stub import, ToolRL's strict layout, and DARA's rewards (rewards/bfcl.py, toolcall.py)."""
import argparse
import importlib.metadata
import json
import subprocess
import sys

import pytest

from rewards.bfcl import BFCL_VERSION, checker_route, match_score, toolrl_partial_credit
from rewards.conventions import TRL
from rewards.pooled import PooledRewards
from rewards.registry import BuiltInRewardSettings, build_reward_fn, reward_spec
from rewards.toolcall import (LengthBudgetReward, ThinkLengthReward, ToolCallVerifier, ToolCorrectReward,
                              ToolFormatReward, add_toolcall_reward_flags, exceed_and_joint, parse_response)
from tests.helpers import REPO_ROOT

TRIANGLE = {"id": "t0", "category": "simple_python",
            "function": [{"name": "calculate_triangle_area", "description": "Area of a triangle.",
                          "parameters": {"type": "dict", "properties": {
                              "base": {"type": "integer", "description": "base"},
                              "height": {"type": "integer", "description": "height"},
                              "unit": {"type": "string", "description": "unit"}}, "required": ["base", "height"]}}],
            "ground_truth": [{"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}]}
NO_CALL = {**TRIANGLE, "id": "i0", "category": "irrelevance", "ground_truth": []}


def answer(*calls, think="Area of a triangle; one call."):
    return f"<think>{think}</think>\n<tool_call>\n" + "\n".join(json.dumps(c) for c in calls) + "\n</tool_call>"


def triangle(base=10, **extra):
    return {"name": "calculate_triangle_area", "parameters": {"base": base, "height": 5, **extra}}


def test_bfcl_eval_is_the_pinned_version():
    assert importlib.metadata.version("bfcl-eval") == BFCL_VERSION


def test_the_stub_import_scores_a_real_bfcl_row_right_and_wrong_and_writes_nothing(tmp_path):
    # a fresh interpreter in an empty folder: the checker imports from nothing but the standard library, scores BFCL's
    # simple_python_0 from the installed package, and neither model_config nor eval_config (which creates folders) loads
    script = """
import json, os, sys
sys.path.insert(0, sys.argv[1])
from envs.toolcall_data import bfcl_category
from rewards.toolcall import ToolCallVerifier
row = bfcl_category("simple_python")[0]
assert row["id"] == "simple_python_0", row["id"]
call = lambda base: '<think>t</think><tool_call>{"name": "calculate_triangle_area", "parameters": {"base": %d, "height": 5}}</tool_call>' % base
right, wrong = ToolCallVerifier().judge(call(10), row), ToolCallVerifier().judge(call(11), row)
loaded = sorted(m for m in sys.modules if m.startswith("bfcl_eval.constants"))
print(json.dumps([right.correct, wrong.correct, wrong.error_type, loaded, os.listdir(".")]))
"""
    out = subprocess.run([sys.executable, "-c", script, REPO_ROOT], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    right, wrong, error_type, loaded, files = json.loads(out.stdout)
    assert (right, wrong, error_type) == (True, False, "value_error:others")
    assert loaded == ["bfcl_eval.constants", "bfcl_eval.constants.enums", "bfcl_eval.constants.type_mappings"]
    assert files == []


def test_a_strict_parse_reads_one_call_per_line_in_toolrl_s_layout():
    parsed = parse_response(answer(triangle(), triangle(base=3)))
    assert parsed.error is None and [c["parameters"]["base"] for c in parsed.calls] == [10, 3]
    assert parse_response("  <think>x</think><tool_call>" + json.dumps(triangle()) + "</tool_call>\n").error is None


@pytest.mark.parametrize("text,code", [
    ("", "empty"),
    ("I would call calculate_triangle_area.", "no_think"),
    ("Sure. <think>x</think>\n<tool_call>\n{}\n</tool_call>", "text_before_think"),
    ("<think>x</think><think>y</think><tool_call>\n" + json.dumps(triangle()) + "\n</tool_call>", "repeated_tag"),
    ("<think>x\n<tool_call>\n" + json.dumps(triangle()) + "\n</tool_call>", "unclosed_think"),
    ("<think>x</think>\n" + json.dumps(triangle()), "no_tool_call"),
    ("<think>x</think>\n<tool_call>\n" + json.dumps(triangle()), "unclosed_tool_call"),
    ("<think>x</think>\n<tool_call>\n\n</tool_call>", "empty_tool_call"),
    ("<think>x</think>\n<tool_call>\n{\"name\": \"f\", \"parameters\": {}\n</tool_call>", "bad_json"),
    ("<think>x</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "not_a_call"),
    ("<think>x</think>\n<tool_call>\n{\"name\": \"f\", \"parameters\": [1]}\n</tool_call>", "not_a_call"),
    (answer(triangle()) + "\nDone!", "text_after_block"),
    ("<think>x</think>\n<response>I cannot help.</response>", "wrong_block"),
])
def test_a_response_that_breaks_the_layout_says_why(text, code):
    assert parse_response(text).error.split(":")[0] == code


def test_a_bad_json_line_is_named():
    text = "<think>x</think>\n<tool_call>\n" + json.dumps(triangle()) + "\n{\"name\": \"f\",}\n</tool_call>"
    assert parse_response(text).error.startswith("bad_json: call line 2:")


def test_format_and_correctness_are_judged_apart():
    fmt, correct = ToolFormatReward(), ToolCorrectReward()
    assert (fmt(None, answer(triangle()), TRIANGLE), correct(None, answer(triangle()), TRIANGLE)) == (1.0, 1.0)
    assert (fmt(None, answer(triangle(base=11)), TRIANGLE), correct(None, answer(triangle(base=11)), TRIANGLE)) == \
        (1.0, 0.0)
    assert (fmt(None, "base 10, height 5", TRIANGLE), correct(None, "base 10, height 5", TRIANGLE)) == (0.0, 0.0)
    assert correct(None, answer(triangle(unit="units")), TRIANGLE) == 1.0  # an accepted optional value
    verdict = ToolCallVerifier().judge(answer(triangle(base=11)), TRIANGLE)
    assert verdict.error_type == "value_error:others" and "Expected one of [10]" in verdict.error


def test_a_no_call_row_wants_a_response_block_and_no_call():
    fmt, correct = ToolFormatReward(), ToolCorrectReward()
    declined = "<think>No function computes this.</think>\n<response>I cannot do that.</response>"
    assert (fmt(None, declined, NO_CALL), correct(None, declined, NO_CALL)) == (1.0, 1.0)
    assert (fmt(None, answer(triangle()), NO_CALL), correct(None, answer(triangle()), NO_CALL)) == (0.0, 0.0)
    assert checker_route(NO_CALL) == "irrelevance"


def test_the_checker_route_of_a_user_row_follows_its_answer_s_shape():
    two_functions = TRIANGLE["function"] * 2
    assert checker_route({**TRIANGLE, "category": "geometry"}) == "simple_python"
    assert checker_route({**TRIANGLE, "category": None, "function": two_functions}) == "multiple"
    assert checker_route({**TRIANGLE, "category": "x", "ground_truth": TRIANGLE["ground_truth"] * 2}) == "parallel"


def test_toolrl_partial_credit_ranks_names_then_argument_names_then_values():
    correct = ToolCorrectReward("toolrl")
    assert correct(None, answer(triangle()), TRIANGLE) == 3.0
    assert correct(None, "no layout at all", TRIANGLE) == -3.0
    assert correct(None, "<think>x</think>\n<response>no</response>", NO_CALL) == 0.0  # ToolRL: no-call rows score 0
    wrong_value = correct(None, answer(triangle(base=11)), TRIANGLE)
    wrong_name = correct(None, answer({"name": "area", "parameters": {"base": 10, "height": 5}}), TRIANGLE)
    assert wrong_name == -3.0 < wrong_value < 3.0  # ToolRL compares arguments only within a call of the right name
    # S = names 1 + argument names 1 + one of two values = 3 of S_max = 1 + (1 + 2) = 4: R = 6 * 3 / 4 - 3
    assert wrong_value == pytest.approx(1.5)
    assert toolrl_partial_credit([{"area": {}}], TRIANGLE["ground_truth"]) == pytest.approx(-3.0)
    assert match_score(["a", "a", "b"], ["a", "b"]) == pytest.approx(2 / 3) and match_score([], []) == 1.0


@pytest.mark.parametrize("words,reward", [(16, 1.0), (17, 0.0), (0, 1.0)])
def test_think_length_counts_the_words_between_the_tags(words, reward):
    assert ThinkLengthReward(16)(None, answer(triangle(), think=" ".join(["w"] * words)), TRIANGLE) == reward


def test_think_length_is_zero_when_the_tags_are_missing():
    assert ThinkLengthReward(16)(None, "short", TRIANGLE) == 0.0
    assert ThinkLengthReward(16)(None, "<think>short and never closed", TRIANGLE) == 0.0


def test_think_length_reads_the_last_think_block_as_the_dara_authors_code():
    # zhaihaotian/DARA@0459102 rlla.py customize_length_reward_func: response.split("<think>")[-1].split("</think>")[0]
    def authors(response, limit=16):
        if "<think>" not in response or "</think>" not in response:
            return 0.0
        return float(len(response.split("<think>")[-1].split("</think>")[0].strip().split()) <= limit)
    long_then_short = "<think>" + "w " * 20 + "</think>\n<think>two words</think>"
    short_then_long = "<think>two words</think>\n<think>" + "w " * 20 + "</think>"
    for response in (long_then_short, short_then_long, "<think>a</think> text <think>" + "w " * 20):
        assert ThinkLengthReward(16)(None, response, TRIANGLE) == authors(response)
    assert ThinkLengthReward(16)(None, long_then_short, TRIANGLE) == 1.0  # the first block would have given 0


def test_length_budget_counts_the_sampled_token_ids():
    reward = LengthBudgetReward(3)
    assert reward(["p", "p"], ["a", "b"], completion_ids=[[1, 2, 3], [1, 2, 3, 4]]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="completion_ids"):
        reward(["p"], ["a"])


def test_exceed_and_joint_over_responses():
    assert exceed_and_joint([10, 20, 30, 5], [True, True, False, False], budget=20) == {"Exceed": 0.25, "Joint": 0.5}
    assert exceed_and_joint([], [], 5) == {}


def parsed_flags(*argv):
    parser = argparse.ArgumentParser()
    add_toolcall_reward_flags(parser)
    return BuiltInRewardSettings.from_args(parser.parse_args(list(argv)))


def test_the_four_rewards_build_by_name_with_their_flags():
    args = parsed_flags("--tool_correct_mode", "toolrl", "--think_length_limit", "3", "--length_budget_tokens", "64")
    assert isinstance(build_reward_fn("tool_format", args), ToolFormatReward)
    assert build_reward_fn("tool_correct", args).mode == "toolrl"
    assert build_reward_fn("think_length", args).limit == 3
    assert build_reward_fn("length_budget", args).budget == 64
    assert reward_spec("length_budget", args).style == TRL  # it needs completion_ids
    assert parsed_flags().think_length_limit == 16  # DARA C.3


def test_length_budget_without_a_budget_is_refused_by_name():
    with pytest.raises(KeyError, match="--length_budget_tokens"):
        build_reward_fn("length_budget", parsed_flags())
    with pytest.raises(KeyError, match=">= 1"):
        build_reward_fn("length_budget", parsed_flags("--length_budget_tokens", "0"))


def test_the_rewards_run_in_the_worker_pool_as_a_training_step_calls_them():
    args = parsed_flags("--length_budget_tokens", "2")
    names = ("tool_format", "tool_correct", "think_length", "length_budget")
    pool = PooledRewards([reward_spec(name, args) for name in names], workers=2, timeout_s=60, group_size=2)
    try:
        scores = pool.score(["q", "q"], [answer(triangle()), "no layout"], [TRIANGLE, TRIANGLE],
                            completion_ids=[[1, 2], [1, 2, 3]])
    finally:
        pool.close()
    assert scores == [[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]]
    assert all(a.stats.failures == 0 for a in pool.accounts)
