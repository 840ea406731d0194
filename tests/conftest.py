import functools
import os

import pytest

from tests.helpers import ZERO3_TWO_RANK_RUN, build_tiny_model, free_port, run_train

# Session runs that tests in several files read (below): under pytest-xdist each worker builds its own copy of a
# session fixture, so every file that reads one runs on the same worker.
SHARED_RUNS = ("zero3_two_rank_run", "maestro_two_rank_run")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: real-model or real-launcher runs (seconds to minutes)")
    config.addinivalue_line("markers", "serial: cannot share the machine with another test (it looks at every process, "
                            "uid, segment or file of the machine or checkout, or asserts a wall-clock bound a second "
                            "test would break): scripts/test.sh runs these alone, after the parallel phase")


# `bash scripts/test.sh` runs the tests not marked serial on 2 pytest-xdist workers, then the serial ones in one
# process. The parallel phase hands out whole work units: a test file, or every file that reads one of SHARED_RUNS.
# Whole files, because 27 files have module-scoped fixtures (a launch in about half of them) that xdist's default,
# test-by-test scheduling would build on both workers; shared runs, because a session fixture is built once per
# worker. That is `--dist loadfile` with the files of one shared run merged, which xdist does not offer by itself
# (loadgroup's markers rename every test id to `id@group`, which cannot be pasted back into pytest).
@functools.lru_cache(maxsize=None)
def work_unit(rootdir: str, path: str) -> str:
    """The file's path, or the first shared run its source names (a fixture is requested by its name)."""
    try:
        with open(os.path.join(rootdir, path)) as f:
            source = f.read()
    except OSError:
        return path
    return next((name for name in SHARED_RUNS if name in source), path)


@pytest.hookimpl(optionalhook=True)  # optional: .venv-vllm's pytest loads this file without xdist
def pytest_xdist_make_scheduler(config, log):
    if config.option.dist != "load":  # xdist's default under -n; an explicit other --dist is kept
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WholeFilesAndSharedRuns(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return work_unit(str(config.rootpath), nodeid.split("::")[0])

    # units in the order the workers collected them (below), not xdist's largest-count-first reordering, which would
    # put the vLLM suite's 2 tests (2 minutes) last, with the other worker idle
    config.option.loadscopereorder = False
    return WholeFilesAndSharedRuns(config, log)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """On an xdist worker: the units with a slow test (a launch, seconds to minutes) first, each in its own order, so
    that the last units handed out are short and neither worker waits long for the other at the end."""
    if not hasattr(config, "workerinput"):
        return
    unit = {item: work_unit(str(config.rootpath), item.nodeid.split("::")[0]) for item in items}
    slow_units = {unit[item] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: unit[item] not in slow_units)  # stable: a unit keeps its collection order


# The number of tests this run selected, printed at the end: under xdist with -q pytest prints none, and the two phases
# of scripts/test.sh must add up to `pytest --collect-only -q`'s count (a module skipped as a whole, the vLLM modules
# outside .venv-vllm, is no test there but is reported as one skip by each phase).
SELECTED = pytest.StashKey[int]()


def pytest_collection_finish(session):
    session.config.stash[SELECTED] = len(session.items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    node.config.stash[SELECTED] = len(ids)  # the controller: each worker collected the same tests


def pytest_terminal_summary(terminalreporter, config):
    if SELECTED in config.stash and not hasattr(config, "workerinput"):
        terminalreporter.write_line(f"{config.stash[SELECTED]} tests selected")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    return build_tiny_model(str(tmp_path_factory.mktemp("tiny_model")))


@pytest.fixture(scope="session")
def zero3_two_rank_run(tiny_model_dir, tmp_path_factory):
    """One 2-rank ZeRO-3 run under the real `deepspeed` launcher (ZERO3_TWO_RANK_RUN, TensorBoard on, the final export
    made) for every test that reads one: its metrics, checkpoint and export (test_train_deepspeed), the uninterrupted
    run a stop and resume must match (test_fault_tolerance), the run without validation (test_validation). Each of
    those files launched its own before. (output folder, CompletedProcess, master port)"""
    out = str(tmp_path_factory.mktemp("zero3_2rank"))
    port = free_port()
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *ZERO3_TWO_RANK_RUN,
                      "--enable_tensorboard"], num_ranks=2, port=port)
    assert proc.returncode == 0, \
        f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout[-4000:]}\nSTDERR:\n{proc.stderr[-4000:]}"
    return out, proc, port


@pytest.fixture(scope="session")
def maestro_two_rank_run(tiny_model_dir, tmp_path_factory):
    """One 10-step 2-rank MAESTRO run under the real launcher (tests.train.test_train_maestro.RUN; checkpoints at
    steps 3, 6, 9 and 10, all kept), read by test_train_maestro (its first 3 steps and step 3's checkpoint) and by
    test_runs_repeat (the first of the two runs it compares). (output folder, CompletedProcess)"""
    from tests.train.test_train_maestro import RUN, SHARED_STEPS
    out = str(tmp_path_factory.mktemp("maestro_2rank"))
    proc = run_train(["--model_name_or_path", tiny_model_dir, "--output_dir", out, *RUN, *SHARED_STEPS],
                     num_ranks=2)
    assert proc.returncode == 0, \
        f"exit {proc.returncode}\nSTDOUT:\n{proc.stdout[-4000:]}\nSTDERR:\n{proc.stderr[-4000:]}"
    return out, proc
