"""--episode_end resolved at parse time: max_turns for tcpo and mt_grpo (their papers' protocol), success otherwise;
refused where an env ends its own episodes; handed only to envs that take it."""
import pytest

from envs import env_class
from rl.config import parse_args
from rl.rollout.episode_end import env_kwargs
from rl.scoring import Scorer, ScoringSettings


def _args(model, *argv):
    return parse_args(["--model_name_or_path", model, "--output_dir", "o", *argv])


@pytest.mark.parametrize("algo,expected", [("tcpo", "max_turns"), ("mt_grpo", "max_turns"), ("grpo", "success")])
def test_auto_resolves_to_the_protocol_of_the_method(algo, expected, tiny_model_dir):
    args = _args(tiny_model_dir, "--algo", algo, "--max_turns", "3")
    assert args.episode_end == expected


def test_an_explicit_choice_overrides_the_method_default(tiny_model_dir):
    assert _args(tiny_model_dir, "--algo", "tcpo", "--max_turns", "3", "--episode_end", "success").episode_end == \
        "success"
    assert _args(tiny_model_dir, "--algo", "grpo", "--max_turns", "3", "--episode_end", "max_turns").episode_end == \
        "max_turns"


def test_max_turns_is_refused_for_an_env_with_its_own_end(tiny_model_dir, capsys):
    with pytest.raises(SystemExit) as exc:
        _args(tiny_model_dir, "--algo", "tcpo", "--env", "appworld", "--max_turns", "3", "--episode_end", "max_turns")
    assert "--episode_end max_turns" in str(exc.value) and "appworld" in str(exc.value)
    # auto leaves AppWorld its own end (complete_task) and hands it no episode_end
    args = _args(tiny_model_dir, "--algo", "tcpo", "--env", "appworld", "--max_turns", "3")
    assert env_kwargs(args.episode_end, env_class("appworld")) == {}


def test_the_trainer_s_envs_play_to_the_resolved_end(tiny_model_dir):
    env = Scorer(ScoringSettings.from_args(_args(tiny_model_dir, "--algo", "tcpo", "--max_turns", "3"))).new_env()
    assert env.episode_end == "max_turns"
    env = Scorer(ScoringSettings.from_args(_args(tiny_model_dir, "--algo", "grpo", "--max_turns", "3"))).new_env()
    assert env.episode_end == "success"
