import pytest

from tests.helpers import ZERO3_TWO_RANK_RUN, build_tiny_model, free_port, run_train


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: real-model or real-launcher runs (seconds to minutes)")


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
