"""The env contract's checks on their own: what a wrong return looks like to the user."""
import pytest

from envs.arith import ArithEnv
from envs.base import StepResult
from rl.rollout.env_contract import EnvContractError, check_reset, check_step_result


class MyEnv(ArithEnv):
    pass


@pytest.mark.parametrize("messages,fragment", [
    ("What is 2+3?", "MyEnv.reset returned str 'What is 2+3?'"),
    ([], "MyEnv.reset returned an empty list"),
    (["What is 2+3?"], "MyEnv.reset returned a list whose item 0 is str"),
    ([{"role": "user", "text": "2+3"}], "item 0 is dict"),
])
def test_reset_that_does_not_return_chat_messages_is_refused(messages, fragment):
    with pytest.raises(EnvContractError) as exc:
        check_reset(MyEnv(), messages)
    assert fragment in str(exc.value) and "envs/README.md" in str(exc.value)


@pytest.mark.parametrize("result,fragment", [
    (1.0, "MyEnv.step returned float 1.0"),
    ((["ok"], 1.0), "MyEnv.step returned tuple"),
    (StepResult(observation=[], score="1"), "StepResult.score = str '1'; it must be a number"),
    (StepResult(observation="try again", score=0.0, done=False), "observation str 'try again'"),
    (StepResult(observation=[], score=1.0, components={"fmt": "ok"}), "non-numeric values {'fmt': 'ok'}"),
    (StepResult(observation=[], score=1.0, info=None), "StepResult.info = NoneType None; it must be a dict"),
])
def test_step_that_does_not_return_a_well_formed_step_result_is_refused(result, fragment):
    with pytest.raises(EnvContractError) as exc:
        check_step_result(MyEnv(), result)
    assert fragment in str(exc.value)


def test_a_well_formed_step_result_passes_unchanged():
    result = StepResult(observation=[{"role": "user", "content": "again"}], score=1, components={"c": True},
                        done=False, info={"id": "t1"})
    assert check_step_result(MyEnv(), result) is result


@pytest.mark.slow
def test_train_py_stops_at_the_first_reset_with_the_env_and_method_named(tiny_model_dir, tmp_path):
    from tests.helpers import run_train_in_process
    proc = run_train_in_process(["--model_name_or_path", tiny_model_dir, "--env", "tests.fixture_envs:StrResetEnv",
                                 "--output_dir", str(tmp_path), "--max_steps", "1", "--actor_zero_stage", "0",
                                 "--num_generations", "2", "--per_device_generation_batch_size", "2",
                                 "--max_answer_seq_len", "4", "--no_final_export"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "train.py: stopped: StrResetEnv.reset returned str" in proc.stderr
    assert "Traceback" not in proc.stderr
