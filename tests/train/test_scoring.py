"""Scorer: --reward_funcs in killable workers, per-function failure accounting, TRL-style rewards."""
import math
import time

import pytest
import torch

from rl.config import parse_args
from rl.errors import RewardFailure
from rl.scoring import Scorer, ScoringSettings
from rl.types import Rollout

N = 8  # completions on the rank (2 prompts x 4 generations)


def make_scorer(*flags):
    args = parse_args(["--env", "tests.fixture_envs:DigitFractionEnv", "--model_name_or_path", "tiny-model",
                       "--num_generations", "4", "--per_device_generation_batch_size", "2", *flags])
    scorer = Scorer(ScoringSettings.from_args(args))
    return scorer


def make_batch(answers=None, completions=None):
    completions = completions or [f"{i} apples" for i in range(N)]
    answers = answers or [str(i) for i in range(N)]
    response = torch.tensor([[5, 6, 7, 0]] * N)
    return Rollout(input_ids=torch.cat([torch.ones(N, 2, dtype=torch.long), response], 1),
                   attention_mask=torch.ones(N, 6, dtype=torch.long),
                   response_mask=torch.tensor([[1.0, 1.0, 1.0, 0.0]] * N), prompt_len=2,
                   group_ids=torch.arange(N) // 4, completions=completions,
                   samples=[{"prompt": "What is it?", "question": "q", "answer": a} for a in answers],
                   turn_scores=torch.ones(N, 1), prompts=["What is it?"] * N)


def verifier_succeeds(scorer):
    """The env steps of the step: N successful verifier calls, as a rollout makes."""
    for _ in range(N):
        assert scorer.verifier.run(lambda: 1.0)[0]


@pytest.fixture
def closing():
    made = []
    yield made
    for scorer in made:
        scorer.close()


@pytest.mark.serial  # a wall-clock bound (5 s for 2 timeouts of 1 s and new workers) a second test could break
def test_a_hanging_reward_costs_about_two_timeouts_per_step_not_one_per_call_and_stops_the_run(closing):
    scorer = make_scorer("--reward_funcs", "correctness,tests.fixture_rewards:hangs", "--reward_timeout", "1",
                         "--max_reward_error_rate", "1")
    closing.append(scorer)
    scorer.score(make_batch(), step=1)  # the first step also starts the worker processes
    start = time.monotonic()
    batch = scorer.score(make_batch(), step=2)
    elapsed = time.monotonic() - start
    assert elapsed < 5.0, f"{N} hanging calls took {elapsed:.1f}s with --reward_timeout 1"  # each call and its retry
    assert batch.components["hangs"].tolist() == [0.0] * N
    with pytest.raises(RewardFailure, match="every one outside the response"):  # rate 1, yet the judge is down
        scorer.check_failures(2)
    counts = scorer.step_counts["hangs"]  # both steps' calls, counted as timeouts (each retried once)
    assert (counts["calls"], counts["timeouts"], counts["retried"], counts["recovered"]) == (2 * N, 2 * N, 2 * N, 0)


def test_an_always_raising_reward_stops_the_run_naming_it_next_to_a_working_verifier(closing):
    scorer = make_scorer("--reward_funcs", "correctness,tests.fixture_rewards:always_raises")
    closing.append(scorer)
    verifier_succeeds(scorer)
    scorer.score(make_batch(), step=1)
    with pytest.raises(RewardFailure) as exc:
        scorer.check_failures(1)  # 8 of the step's 16 calls failed: all of always_raises' own
    message = str(exc.value)
    assert "'always_raises'" in message and "8 of 8" in message and "judge API key missing" in message
    assert "correctness" not in message


def test_errors_metric_counts_this_steps_failures_not_a_running_total(closing):
    scorer = make_scorer("--reward_funcs", "correctness,tests.fixture_rewards:always_raises",
                         "--max_reward_error_rate", "1")
    closing.append(scorer)
    for step in (1, 2):
        verifier_succeeds(scorer)
        batch = scorer.score(make_batch(), step=step)
        scorer.check_failures(step)
    inputs = _inputs(batch)
    metrics = scorer.metrics(inputs)
    assert metrics["reward/always_raises/errors"] == N and metrics["reward/correctness/errors"] == 0


def _inputs(batch):
    return batch.gather()  # one rank: the local rows are the global batch


def test_a_trl_style_reward_gets_trls_keyword_arguments(closing):
    scorer = make_scorer("--reward_funcs", "tests.fixture_rewards:echo_trl_kwargs")
    closing.append(scorer)
    answers = [str(i) for i in range(N - 1)] + ["abstain"]
    batch = scorer.score(make_batch(answers=answers), step=3)
    values = batch.components["echo_trl_kwargs"].tolist()
    # the `answer` column, trainer_state.global_step and the 3 response tokens came through; None abstains
    assert values[:-1] == [i + 3000 + 3 for i in range(N - 1)] and math.isnan(values[-1])
    scorer.check_failures(3)
    assert (scorer.step_counts["echo_trl_kwargs"]["calls"], scorer.step_counts["echo_trl_kwargs"]["failures"]) == (N, 0)


def test_a_trl_style_reward_scores_like_the_same_reward_in_credos_convention(closing):
    trl = make_scorer("--reward_funcs", "tests.fixture_rewards:digit_fraction")
    closing.append(trl)
    completions = ["12 ab", "abc", "1", "x9y8", "", "77", "a1", "zz"]
    values = trl.score(make_batch(completions=completions), step=1).components["digit_fraction"].tolist()
    expected = [sum(c.isdigit() for c in t) / max(len(t), 1) for t in completions]
    assert values == pytest.approx(expected)


@pytest.mark.parametrize("name, why", [("not_a_reward", "(text)"), ("trl_without_kwargs", "no **kwargs")])
def test_a_reward_with_a_wrong_signature_is_refused_when_flags_are_parsed(name, why):
    with pytest.raises(SystemExit) as exc:
        make_scorer("--reward_funcs", f"correctness,tests.fixture_rewards:{name}")
    message = str(exc.value)
    assert f"tests.fixture_rewards:{name}" in message and why in message


def test_a_credo_reward_and_the_reward_flags_are_accepted():
    args = parse_args(["--env", "tests.fixture_envs:DigitFractionEnv", "--model_name_or_path", "tiny-model",
                       "--reward_funcs", "correctness,tests.fixture_envs:half_reward,tests.fixture_rewards:hangs",
                       "--reward_timeout", "2.5", "--reward_workers", "3"])
    assert args.reward_timeout == 2.5 and args.reward_workers == 3
    with pytest.raises(SystemExit, match="--reward_timeout"):
        parse_args(["--model_name_or_path", "tiny-model", "--reward_timeout", "0"])


def test_a_trl_style_reward_is_called_on_whole_prompt_groups(closing):
    scorer = make_scorer("--reward_funcs", "tests.fixture_rewards:chunk_size", "--reward_workers", "8")
    closing.append(scorer)
    assert scorer.score(make_batch(), step=1).components["chunk_size"].tolist() == [4.0] * N  # 2 groups of 4


def test_two_rewards_that_would_report_under_one_name_are_refused():
    with pytest.raises(SystemExit, match="one name"):
        make_scorer("--reward_funcs", "correctness,tests.fixture_rewards:hangs,tests.train.test_scoring:hangs")


def hangs(prompt, completion, sample):  # a second `hangs`, in another module
    return 0.0
