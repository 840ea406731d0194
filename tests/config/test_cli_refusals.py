"""What a newcomer sees for a wrong flag and in --help: a few lines naming the nearest credo flag (or credo's name for
a TRL one), and each default printed once, relative to the checkout."""
import pytest

from rl import REPO_ROOT
from rl.config import TRL_NAMES, build_parser


def refusal(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_a_misspelt_flag_is_refused_in_a_few_lines_with_the_nearest_flag(capsys):
    err = refusal(["--max_step", "3"], capsys)
    assert err.splitlines()[0] == "train.py: error: unrecognized arguments: --max_step 3"
    assert "did you mean --max_steps" in err
    assert len(err.splitlines()) <= 4 and "usage:" not in err


@pytest.mark.parametrize("trl_flag,credo_flag", [("--learning_rate", "--actor_learning_rate"),
                                                 ("--per_device_train_batch_size", "--per_device_generation_batch_size"),
                                                 ("--max_completion_length", "--max_answer_seq_len")])
def test_trl_s_common_names_are_answered_with_credo_s(trl_flag, credo_flag, capsys):
    err = refusal([trl_flag, "8"], capsys)
    assert f"{trl_flag} is TRL's name; credo's is {credo_flag}" in err


def test_every_trl_name_points_at_a_real_credo_flag():
    known = {o for action in build_parser()._actions for o in action.option_strings}
    for trl_flag, answer in TRL_NAMES.items():
        assert trl_flag not in known
        assert answer.split()[0] in known, (trl_flag, answer)


def test_help_prints_each_default_once_relative_and_without_issue_numbers():
    text = build_parser().format_help()
    assert "(default: None)" not in text
    assert "(default: True)" not in text and "(default: False)" not in text
    assert text.count("(default: ") == len([line for line in text.splitlines() if "(default: " in line])
    assert REPO_ROOT not in text  # no absolute path of the machine that printed it
    assert "issue" not in text.lower()
    # a help that states its own default gets no second one appended
    meta_reward = text[text.index("--maestro_meta_reward"):text.index("--maestro_emphasis")]
    assert "(default: advantage)" not in meta_reward
    assert "(default; the paper" in text and "the paper: the GRPO group advantage" in " ".join(text.split())
