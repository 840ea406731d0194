"""System flags that did nothing silently are refused at parse time, naming the flag."""
import pytest

from tests.test_config import _refused


@pytest.mark.parametrize("argv,fragment", [
    (["--tensorboard_path", "tb"], "add --enable_tensorboard"),
    (["--offload", "--actor_zero_stage", "0"], "--offload"),
])
def test_a_flag_that_would_be_ignored_is_refused(argv, fragment, tiny_model_dir, capsys):
    assert fragment in _refused([*argv, "--model_name_or_path", tiny_model_dir], capsys)


def test_tensorboard_path_with_tensorboard_on_is_kept(tiny_model_dir):
    from rl.config import parse_args
    args = parse_args(["--model_name_or_path", tiny_model_dir, "--enable_tensorboard", "--tensorboard_path", "tb"])
    assert args.tensorboard_path == "tb"
