import os
import time

import pytest

from rewards.worker_pool import WorkerPool
from tests.procs import alive

HANGS, PRINTS, EXITS, CHILD = (("import", f"tests.fixture_rewards:{n}") for n in
                               ("hangs", "prints_then_scores", "exits_mid_call", "spawns_a_child_and_hangs"))


@pytest.fixture
def pool():
    p = WorkerPool([HANGS, PRINTS, EXITS, CHILD, ("import", "no_such_module:fn")], workers=4, timeout_s=1.0)
    p.map([(1, ("p", "c", {}), {})])  # start one worker outside the timed parts
    yield p
    p.close()


@pytest.mark.serial  # a wall-clock bound (4 s for about 2.3 s of work) that a second test on the cores could break
def test_calls_that_all_hang_cost_about_two_timeouts_the_call_and_its_retry_not_one_per_call(pool):
    start = time.monotonic()
    outcomes = pool.map([(0, ("p", "c", {}), {})] * 4)
    elapsed = time.monotonic() - start
    assert [(o.status, o.retried) for o in outcomes] == [("timeout", True)] * 4
    assert elapsed < 4.0, f"4 hanging calls on 4 workers took {elapsed:.1f}s"  # two 1 s timeouts (+ startups)
    assert pool.map([(1, ("p", "c", {}), {})])[0].value == 0.25  # fresh workers serve the next calls


def test_a_timed_out_call_kills_the_processes_its_function_started(pool, tmp_path):
    pid_file = str(tmp_path / "child.pid")
    assert pool.map([(3, ("p", "c", {"pid_file": pid_file}), {})])[0].status == "timeout"
    child = int(open(pid_file).read())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.05)
    assert not alive(child)


def test_a_reward_that_prints_does_not_corrupt_the_replies(pool):
    assert [o.value for o in pool.map([(1, ("p", "c", {}), {})] * 6)] == [0.25] * 6


def test_a_worker_that_dies_mid_call_on_each_try_is_an_infrastructure_failure_and_is_replaced(pool):
    died, fine = pool.map([(2, ("p", "c", {}), {}), (1, ("p", "c", {}), {})])
    assert (died.status, died.retried) == ("infra", True) and "exited (code 3)" in died.value
    assert "exited (code 3)" in died.first_failure
    assert (fine.value, fine.retried) == (0.25, False)
    assert pool.map([(1, ("p", "c", {}), {})])[0].value == 0.25


def test_a_function_that_cannot_be_imported_fails_its_calls_with_the_cause(pool):
    outcome = pool.map([(4, (), {})])[0]
    assert outcome.status == "infra" and "no_such_module" in outcome.value  # a missing module is not the response's


def test_workers_are_separate_processes_that_close_stops():
    p = WorkerPool([("import", "os:getpid")], workers=2, timeout_s=5.0)
    pids = {o.value for o in p.map([(0, (), {})] * 2)}
    assert os.getpid() not in pids
    p.close()  # kills each worker's process group and reaps the worker before it returns
    assert not any(alive(int(pid)) for pid in pids)


def test_workers_started_from_a_short_lived_thread_outlive_that_thread():
    """Env steps (math-verify) start workers from the episode threads, which end after each turn."""
    import threading
    p = WorkerPool([("import", "os:getpid")], workers=1, timeout_s=5.0)
    first = []
    thread = threading.Thread(target=lambda: first.append(p.map([(0, (), {})])[0].value))
    thread.start()
    thread.join()
    time.sleep(0.5)
    assert p.map([(0, (), {})])[0].value == first[0]  # the same worker, still alive
    p.close()


def test_a_worker_exits_when_its_trainer_is_killed(tmp_path):
    import signal
    import subprocess
    import sys
    from tests.helpers import REPO_ROOT
    program = ("import sys, time\nfrom rewards.worker_pool import WorkerPool\n"
               "p = WorkerPool([('import', 'os:getpid')], workers=1, timeout_s=5.0)\n"
               "print(int(p.map([(0, (), {})])[0].value), flush=True)\ntime.sleep(600)\n")
    trainer = subprocess.Popen([sys.executable, "-c", program], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    worker = int(trainer.stdout.readline())
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(worker):
        time.sleep(0.1)
    assert not alive(worker)


def test_arguments_that_cannot_be_pickled_fail_that_call_only(pool):
    import threading
    bad, fine = pool.map([(1, ("p", "c", {"lock": threading.Lock()}), {}), (1, ("p", "c", {}), {})])
    assert bad.status == "error" and "cannot be sent" in bad.value and fine.value == 0.25
