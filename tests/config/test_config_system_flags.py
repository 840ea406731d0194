"""System flags that did nothing silently are refused at parse time, naming the flag."""
import pytest

from tests.config.test_config import _refused


@pytest.mark.parametrize("argv,fragment", [
    (["--tensorboard_path", "tb", "--report_to", "jsonl"], "add --enable_tensorboard"),
    (["--offload", "--actor_zero_stage", "0"], "--offload"),
])
def test_a_flag_that_would_be_ignored_is_refused(argv, fragment, tiny_model_dir, capsys):
    assert fragment in _refused([*argv, "--model_name_or_path", tiny_model_dir], capsys)


def test_tensorboard_path_with_tensorboard_on_is_kept(tiny_model_dir):
    from rl.config import parse_args
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--enable_tensorboard", "--tensorboard_path", "tb"])
    assert args.tensorboard_path == "tb"


@pytest.mark.parametrize("flag", ["--reward_weights", "--dara_static_weights"])
def test_a_weight_count_that_cannot_match_the_rewards_is_refused_before_any_rollout(flag, tiny_model_dir, capsys):
    argv = ["--algo", "dara", "--reward_funcs", "correctness,format", flag, "1,2,3", "--model_name_or_path",
            tiny_model_dir]
    assert f"{flag} has 3 entries for 2 rewards" in _refused(argv, capsys)


def test_a_user_reward_may_return_several_components_so_its_weights_are_checked_later(tiny_model_dir):
    from rl.config import parse_args
    args = parse_args(["--algo", "gdpo", "--reward_funcs", "correctness,benchmarks.extra_rewards:concise_answer",
                       "--reward_weights", "1,2,3", "--model_name_or_path", tiny_model_dir])
    assert args.reward_weights == [1.0, 2.0, 3.0]
