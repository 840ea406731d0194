"""The Scorer's side of issue #51 item 3: each failure kind counted in the step's metrics, a response whose reward
worker dies on every try scored 0 (no abstention to buy), a reward that dies on every response stops the run. The
worker deaths are real: the fixture rewards SIGKILL their own worker process."""
import math

import pytest

from rl.errors import RewardFailure
from tests.train.test_scoring import N, make_batch, make_scorer

DIES_ON_POISON = "tests.fixture_rewards:dies_on_poison"
DIES_ONCE = "tests.fixture_rewards:dies_once_per_completion"


@pytest.fixture
def closing():
    made = []
    yield made
    for scorer in made:
        scorer.close()


def scored(closing, reward, *flags, completions=None, marker_dir=None):
    scorer = make_scorer("--reward_funcs", reward, *flags)
    closing.append(scorer)
    batch = make_batch(completions=completions)
    for sample in batch.samples:
        sample["marker_dir"] = str(marker_dir)
    return scorer, scorer.score(batch, step=1)


def test_a_response_that_kills_its_reward_worker_on_both_tries_scores_0_the_others_are_scored(closing, tmp_path):
    completions = [f"{i} apples" for i in range(N - 1)] + ["poison apples"]
    scorer, batch = scored(closing, DIES_ON_POISON, completions=completions, marker_dir=tmp_path)
    values = batch.components["dies_on_poison"].tolist()
    assert values == [1.0] * (N - 1) + [0.0]  # 0, not NaN: dying is no way to abstain
    assert not math.isnan(batch.scores[-1])
    scorer.check_failures(1)  # 1 of 8: under --max_reward_error_rate 0.5, and not every response alike
    m = scorer.metrics(batch.gather())
    assert (m["reward/dies_on_poison/errors"], m["reward/dies_on_poison/errors_infra"]) == (1, 1)
    assert (m["reward/dies_on_poison/retried"], m["reward/dies_on_poison/recovered"]) == (1, 0)
    assert m["reward/dies_on_poison/errors_response"] == 0 and m["reward/dies_on_poison/errors_timeout"] == 0


def test_calls_whose_worker_dies_once_recover_on_the_retry_and_count_as_recovered_not_failed(closing, tmp_path):
    scorer, batch = scored(closing, DIES_ONCE, marker_dir=tmp_path)
    assert batch.components["dies_once_per_completion"].tolist() == [1.0] * N
    scorer.check_failures(1)
    m = scorer.metrics(batch.gather())
    assert m["reward/dies_once_per_completion/retried"] == N and m["reward/dies_once_per_completion/recovered"] == N
    assert m["reward/dies_once_per_completion/errors"] == 0


def test_with_reward_retries_0_the_same_deaths_score_0_and_stop_the_run(closing, tmp_path):
    scorer, batch = scored(closing, DIES_ONCE, "--reward_retries", "0", "--max_reward_error_rate", "1",
                           marker_dir=tmp_path)
    assert batch.components["dies_once_per_completion"].tolist() == [0.0] * N
    with pytest.raises(RewardFailure) as exc:
        scorer.check_failures(1)
    assert "every one outside the response (last error" in str(exc.value)


def test_a_reward_whose_worker_dies_on_every_response_stops_the_run_whatever_the_error_rate(closing, tmp_path):
    scorer, _ = scored(closing, DIES_ON_POISON, "--max_reward_error_rate", "1",
                       completions=["poison"] * N, marker_dir=tmp_path)
    with pytest.raises(RewardFailure) as exc:
        scorer.check_failures(1)
    message = str(exc.value)
    assert "reward 'dies_on_poison': 8 of 8 reward calls failed at step 1, every one outside the response" in message
    assert "after --reward_retries 1" in message and "killed by SIGKILL" in message and "is down" in message
    assert "Nothing was trained on this batch" in message
    assert scorer.step_counts["correctness"]["failures"] == 0


def test_a_reward_that_raises_on_every_response_is_the_error_rates_not_the_down_rule(closing, tmp_path):
    """An ordinary exception is the response's (or a bug): counted as errors_response, not retried."""
    scorer, _ = scored(closing, "tests.fixture_rewards:counts_and_raises", "--max_reward_error_rate", "1",
                       marker_dir=tmp_path)
    scorer.check_failures(1)  # rate 1 lets it through: nothing here says the infrastructure is down
    assert scorer.step_counts["counts_and_raises"]["errors"] == N and scorer.step_counts["counts_and_raises"]["retried"] == 0
    assert len(list(tmp_path.iterdir())) == N  # one attempt per completion


def test_the_math_envs_own_verifier_account_is_judged_and_reported():
    scorer = make_scorer("--env", "math", "--data_path", "data/math500/test.jsonl", "--reward_funcs", "correctness")
    try:
        assert [c.name for c in scorer.callers] == ["correctness", "math-verify"]
    finally:
        scorer.close()
        scorer.shared_verifier.close()
