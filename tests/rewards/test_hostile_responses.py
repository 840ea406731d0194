"""Issue 62 item 3: a response that breaks a parser or a comparator scores as a wrong response, is counted apart from
a broken reward function (`malformed`), and never stops the run; only failures that ordinary inputs also hit count.

First the parsers credo ships (the stdin/stdout comparison, the tool-call parse), then the class: reward functions
written as carelessly as a user's might be, broken by a response but not by the empty one (their control), in
credo's and TRL's conventions, in-process (an env step) and in worker processes; and the failures that still count
(a function broken on ordinary inputs, or never yet working, and what an outage looks like)."""
import decimal
import json
import time
from types import SimpleNamespace

import pytest

from envs.base import Env, StepResult
from rewards.base import RewardCaller
from rewards.code import run_tests
from rewards.code_cases import stdout_matches
from rewards.conventions import CREDO, TRL
from rewards.pooled import PooledRewards
from rewards.registry import RewardSpec
from rewards.toolcall import ToolCallVerifier, ToolCorrectReward, ToolFormatReward, parse_response

HERE = "tests.rewards.test_hostile_responses"
DEEP_LIST, DEEP_DICT = "[" * 1000 + "]" * 1000, '{"a": ' * 1000 + "1" + "}" * 1000
BIG_INT = "9" * 5000


# --- the parsers and comparators credo ships -----------------------------------------------------------------------

@pytest.mark.parametrize("printed", ["sNaN", "1 sNaN", "-sNaN", "sNaN42", "1\nsNaN"])
def test_a_printed_signalling_nan_is_a_wrong_answer_not_a_crash(printed):
    expected = "1 2" if " " in printed else "1\n2" if "\n" in printed else "1"
    assert stdout_matches(printed, expected) is False
    assert stdout_matches("1.50", "1.5") is True  # the comparison itself is unchanged


def test_a_program_printing_snan_fails_its_stdin_test():
    result = run_tests("print('sNaN')\n", [{"stdin": "", "stdout": "1"}, {"stdin": "", "stdout": "sNaN"}],
                       timeout_s=10.0)
    assert result.outcomes == ["wrong answer", None], result


@pytest.fixture(scope="module")
def bfcl_row():
    from envs.toolcall_data import bfcl_category
    return bfcl_category("simple_python")[0]  # calculate_triangle_area(base, height, unit)


@pytest.mark.parametrize("value, code", [(DEEP_LIST, "bad_json"), (DEEP_DICT, "bad_json"), (BIG_INT, "bad_json"),
                                         ("[" * 40 + "]" * 40, "too_deep"), ('{"b": ' * 40 + "1" + "}" * 40,
                                                                             "too_deep")])
def test_a_call_the_parser_cannot_hold_is_a_malformed_response(bfcl_row, value, code):
    name = bfcl_row["function"][0]["name"]
    text = f'<think>x</think>\n<tool_call>\n{{"name": "{name}", "parameters": {{"base": {value}, "height": 5}}}}' \
           f'\n</tool_call>'
    assert parse_response(text).error.startswith(f"{code}: call line 1")
    scores = [fn(None, text, bfcl_row) for fn in (ToolFormatReward(), ToolCorrectReward(), ToolCorrectReward("toolrl"))]
    assert scores == [0.0, 0.0, -3.0]
    from envs.toolcall import ToolCallEnv
    env = ToolCallEnv(verifier=ToolCallVerifier())
    env.reset(bfcl_row)
    step = env.step(text)
    assert (step.score, step.done, step.info["parse_error"].split(":")[0]) == (0.0, True, code)


# --- the class: functions a response breaks, judged by their control ----------------------------------------------

def decimal_judge(prompt, completion, sample):
    """Compares Decimals as LiveCodeBench's grader does, unguarded: `sNaN` raises InvalidOperation."""
    words = completion.split() or ["0"]
    return float(decimal.Decimal(words[-1]) == decimal.Decimal(sample["answer"]))


def json_judge(prompt, completion, sample):
    """Reads a JSON answer, unguarded: deep nesting raises RecursionError, a 5,000-digit integer ValueError."""
    return float(json.loads(completion or "null") == sample["answer"])


def early_judge(prompt, completion, sample):
    """Answers the empty response early and is broken on every real one: its failures count."""
    if not completion:
        return 0.0
    return float(completion == sample["no_such_key"])


def floor_judge(prompt, completion, sample):
    """ToolRL-like: -3 for a response that does not parse (the empty one), and it chokes on deep JSON."""
    return -3.0 if not completion else float(json.loads(completion) == 1)


def broken_judge(prompt, completion, sample):
    """Broken on every input, ordinary ones included: its failures count."""
    raise KeyError("answer_key")


def batched_judge(completions, **kwargs):
    """TRL's convention: one batched call, broken by any one hostile completion."""
    return [float(json.loads(c or "0") == 1) for c in completions]


SNAN_TEXT = "the answer is sNaN"


@pytest.fixture(scope="module")
def pooled():
    names = ["decimal_judge", "json_judge", "early_judge", "floor_judge", "broken_judge"]
    rewards = PooledRewards([RewardSpec(n, ("import", f"{HERE}:{n}"), CREDO) for n in names] +
                            [RewardSpec("batched_judge", ("import", f"{HERE}:batched_judge"), TRL)],
                            workers=4, timeout_s=20.0, group_size=2)
    yield rewards
    rewards.close()


def test_responses_that_break_their_functions_score_the_floor_and_count_as_malformed(pooled):
    completions = ["1", "0", SNAN_TEXT, DEEP_LIST, "\x00", DEEP_DICT, BIG_INT, "1"]  # 4 prompt groups of 2
    scores = pooled.score(["p"] * len(completions), completions, [{"answer": 1} for _ in completions])
    stats = {account.name: account.stats for account in pooled.accounts}
    expected = {  # name: (scores, how many responses broke it)
        "decimal_judge": ([1, 0, 0, 0, 0, 0, 0, 1], 4),  # sNaN, and three texts Decimal cannot read
        "json_judge": ([1, 0, 0, 0, 0, 0, 0, 1], 5),  # sNaN text, deep list and dict, a NUL, the big integer
        "floor_judge": ([1, 0, -3, -3, -3, -3, -3, 1], 5),  # the function's own floor (the empty response's), not 0
        # TRL's convention: a chunk (a prompt group here) that a response broke fails as one call, both its
        # completions at the floor; the first group's keep their scores
        "batched_judge": ([1, 0, 0, 0, 0, 0, 0, 0], 6)}
    for name, (want, broke) in expected.items():
        got = scores[[a.name for a in pooled.accounts].index(name)]
        assert (got, stats[name].malformed, stats[name].failures) == (want, broke, 0), name
    for name in ("broken_judge", "early_judge"):  # broken on the empty response; never scored a real one
        assert (stats[name].errors, stats[name].malformed) == (len(completions), 0), name


def test_a_hang_or_an_outage_is_never_taken_for_the_responses_doing():
    """Timeouts and failures outside the response get no control: the empty response may not reach the judge."""
    def judge(prompt, completion, sample):
        if completion == "hang":
            time.sleep(5)
        if completion == "down":
            raise ConnectionError("judge unreachable")
        return 0.0 if not completion else 1.0
    caller = RewardCaller(judge, "judge", timeout_s=0.2)
    assert caller("p", "ok", {}) == 1.0
    assert caller("p", "hang", {}) == 0.0 and caller("p", "down", {}) == 0.0
    assert (caller.stats.timeouts, caller.stats.infra, caller.stats.malformed) == (1, 1, 0)


@pytest.mark.parametrize("text", [SNAN_TEXT, DEEP_LIST, DEEP_DICT, BIG_INT])
def test_an_in_process_call_broken_by_its_response_is_malformed_once_the_function_has_scored(text):
    def judge(prompt, completion, sample):
        return (decimal_judge if "sNaN" in completion else json_judge)(prompt, completion, sample)
    caller = RewardCaller(judge, "judge")
    assert caller("p", text, {"answer": 1}) == 0.0 and (caller.stats.errors, caller.stats.malformed) == (1, 0)
    assert caller("p", "1", {"answer": 1}) == 1.0  # it works: from now on a response that breaks it is the response's
    assert caller("p", text, {"answer": 1}) == 0.0 and (caller.stats.errors, caller.stats.malformed) == (1, 1)


class ParsingEnv(Env):
    """An env whose step parses the response unguarded; `broken` rows fail on every response."""

    def reset(self, sample):
        self.sample = sample
        return [{"role": "user", "content": "answer in JSON"}]

    def step(self, model_text):
        if self.sample.get("broken"):
            raise RuntimeError("the env's own bug")
        value = json.loads(model_text or "0")
        return StepResult(observation=[], score=float(value == 1), done=True)


@pytest.mark.parametrize("text", [DEEP_LIST, DEEP_DICT, BIG_INT])
def test_an_env_step_broken_by_its_response_ends_the_episode_at_0_and_is_malformed(text):
    from rl.scoring import Scorer
    scorer = SimpleNamespace(verifier=RewardCaller(None, "correctness"), new_env=ParsingEnv)
    for sample, response, counter in (({}, "1", None), ({}, text, "malformed"), ({"broken": True}, text, "errors")):
        env = ParsingEnv()
        env.reset(sample)
        result = Scorer.safe_step(scorer, env, response)
        if counter is None:
            assert result.score == 1.0
            continue
        assert (result.score, result.done, result.info) == (0.0, True, {"failed": True})
        assert getattr(scorer.verifier.stats, counter) == 1
    assert scorer.verifier.stats.failures == 1  # the broken row's only: the run may stop on that one
