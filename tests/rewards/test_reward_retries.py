"""Whose failure is it (issue #51 item 3): a reward call that fails outside the response is retried once on real
worker processes, which these tests SIGKILL from outside (as the OOM killer would) or which kill themselves."""
import os
import signal
import threading
import time

import pytest

from rewards.base import InfrastructureError, RewardCaller
from rewards.worker_pool import WorkerPool

WAITS, REFUSED, RAISES = (("import", f"tests.fixture_rewards:{n}") for n in
                          ("waits_to_be_killed", "refused_connection_once", "counts_and_raises"))


@pytest.fixture
def pool():
    p = WorkerPool([WAITS, REFUSED, RAISES], workers=2, timeout_s=20.0)
    yield p
    p.close()


def kill_workers_as_they_report(pid_dir, kills: int) -> threading.Thread:
    """SIGKILL each worker that writes its pid into pid_dir, `kills` of them, as they appear."""
    def run():
        killed, deadline = set(), time.monotonic() + 30
        while len(killed) < kills and time.monotonic() < deadline:
            for name in set(os.listdir(pid_dir)) - killed:
                os.kill(int(name), signal.SIGKILL)
                killed.add(name)
            time.sleep(0.02)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_worker_killed_mid_call_is_retried_on_a_fresh_worker_and_the_retrys_score_is_used(pool, tmp_path):
    killer = kill_workers_as_they_report(str(tmp_path), kills=1)
    outcome = pool.map([(0, ("p", "c", {"pid_dir": str(tmp_path), "deaths": 1}), {})])[0]
    killer.join()
    assert (outcome.status, outcome.value, outcome.retried) == ("ok", 0.75, True)
    assert "killed by SIGKILL" in outcome.first_failure
    assert len(os.listdir(tmp_path)) == 2  # two attempts, in two worker processes


def test_a_worker_killed_on_the_retry_too_fails_once_retried_never_twice(pool, tmp_path):
    killer = kill_workers_as_they_report(str(tmp_path), kills=2)
    outcome = pool.map([(0, ("p", "c", {"pid_dir": str(tmp_path), "deaths": 5}), {})])[0]
    killer.join()
    assert (outcome.status, outcome.retried) == ("infra", True) and "killed by SIGKILL" in outcome.value
    assert len(os.listdir(tmp_path)) == 2


def test_with_retries_0_a_killed_worker_fails_its_call_at_once(tmp_path):
    p = WorkerPool([WAITS], workers=1, timeout_s=20.0, retries=0)
    killer = kill_workers_as_they_report(str(tmp_path), kills=1)
    outcome = p.map([(0, ("p", "c", {"pid_dir": str(tmp_path), "deaths": 1}), {})])[0]
    killer.join()
    p.close()
    assert (outcome.status, outcome.retried) == ("infra", False) and len(os.listdir(tmp_path)) == 1


def test_a_refused_connection_is_retried_an_ordinary_exception_is_the_responses(pool, tmp_path):
    sample = {"marker_dir": str(tmp_path)}
    refused, raised = pool.map([(1, ("p", "c", sample), {}), (2, ("p", "c", sample), {})])
    assert (refused.status, refused.value, refused.retried) == ("ok", 0.5, True)
    assert "ConnectionRefusedError" in refused.first_failure
    assert (raised.status, raised.retried) == ("error", False) and "cannot parse" in raised.value
    assert len([f for f in os.listdir(tmp_path) if f.startswith("attempt-")]) == 1  # called once: not retried


def test_an_env_step_that_raises_an_infrastructure_error_once_is_retried_in_process():
    attempts = []

    def step(text):
        attempts.append(text)
        if len(attempts) == 1:
            raise InfrastructureError("the sandbox runner did not start")
        return 1.0
    caller = RewardCaller(None, "correctness")
    assert caller.run(step, "text") == (True, 1.0)
    assert (caller.stats.calls, caller.stats.retried, caller.stats.recovered, caller.stats.failures) == (1, 1, 1, 0)


@pytest.mark.parametrize("exc, counter, tries", [(ConnectionError("verifier down"), "infra", 2),
                                                 (FileNotFoundError("no such tool: lean"), "infra", 2),
                                                 (ValueError("bad answer format"), "errors", 1)])
def test_an_in_process_failure_is_retried_only_when_it_is_outside_the_response(exc, counter, tries):
    attempts = []

    def step(text):
        attempts.append(text)
        raise exc
    caller = RewardCaller(None, "correctness")
    assert caller.run(step, "text") == (False, None)
    assert len(attempts) == tries and getattr(caller.stats, counter) == 1 and caller.stats.failures == 1
    assert caller.stats.retried == tries - 1 and caller.stats.recovered == 0


def test_an_in_process_timeout_is_not_retried_its_thread_may_still_hold_the_episode():
    attempts = []
    caller = RewardCaller(None, "correctness", timeout_s=0.2)
    assert caller.run(lambda: attempts.append(1) or time.sleep(1), ) == (False, None)
    assert len(attempts) == 1 and caller.stats.timeouts == 1 and caller.stats.retried == 0


def test_an_env_whose_step_acts_on_a_world_is_never_stepped_twice():
    """AppWorld's step runs a cell that may change the world before a later call (evaluate) fails: its failure
    outside the response ends the episode at score 0 instead of playing the cell again (Env.step_retryable)."""
    from types import SimpleNamespace

    from envs.appworld.env import AppWorldEnv
    from rl.scoring import Scorer
    assert AppWorldEnv.step_retryable is False

    class WorldEnv:
        step_retryable = False

        def __init__(self):
            self.cells = 0

        def step(self, text):
            self.cells += 1  # the world changed
            raise ConnectionError("the world host went away after the cell ran")
    env = WorldEnv()
    scorer = SimpleNamespace(verifier=RewardCaller(None, "correctness"))
    result = Scorer.safe_step(scorer, env, "print(1)")
    assert (result.score, result.done, env.cells) == (0.0, True, 1)
    assert (scorer.verifier.stats.retried, scorer.verifier.stats.infra) == (0, 1)


def test_a_code_sandbox_runner_that_writes_no_verdict_is_a_failure_outside_the_response(tmp_path, monkeypatch):
    """The runner is the trusted supervisor outside the program's sandbox: when it dies without a verdict the program
    is not to blame (it was scored 0 as "killed" before), so the call is retried like a dead reward worker."""
    import rewards.code as code
    from rewards.base import is_infrastructure
    broken = tmp_path / "runner.py"
    broken.write_text("import sys\nsys.stderr.write('runner crashed\\n')\nsys.exit(3)\n")
    monkeypatch.setattr(code, "_RUNNER", str(broken))
    monkeypatch.setattr(code, "_checked", lambda isolation: isolation)  # the isolation probe uses the same runner
    with pytest.raises(InfrastructureError, match="exit 3") as failure:
        code.run_tests("def f():\n    return 1\n", ["assert f() == 1"])
    assert is_infrastructure(failure.value)
    caller = RewardCaller(None, "correctness")
    assert caller.run(code.run_tests, "def f():\n    return 1\n", ["assert f() == 1"]) == (False, None)
    assert (caller.stats.retried, caller.stats.infra, caller.stats.failures) == (1, 1, 1)
