import pytest

from rewards.format import FormatReward
from rewards.length import LengthReward, reasoning_part
from rewards.registry import BuiltInRewardSettings, build_reward_fn


def test_format_reward_styles():
    boxed = FormatReward("boxed")
    assert boxed(None, "so it is \\boxed{12}", {}) == 1.0
    assert boxed(None, "so it is 12", {}) == 0.0
    tags = FormatReward("tags")
    assert tags(None, "<think>3+4</think> <answer>7</answer>", {}) == 1.0
    assert tags(None, "<answer>7</answer>", {}) == 0.0
    custom = FormatReward(r"Answer: \d+$")
    assert custom(None, "thinking\nAnswer: 7", {}) == 1.0


def test_length_reward_counts_words_before_the_final_answer():
    assert reasoning_part("3 plus 4 is \\boxed{7}") == "3 plus 4 is "
    short = LengthReward(limit=4)
    assert short(None, "3 plus 4 is \\boxed{7} and some more words after it", {}) == 1.0
    assert short(None, "well let us think about 3 plus 4 \\boxed{7}", {}) == 0.0
    assert short(None, "no answer but short", {}) == 1.0


def test_reward_registry_builds_by_name_and_dotted_path():
    Args = BuiltInRewardSettings(length_limit=5)
    assert isinstance(build_reward_fn("length", Args), LengthReward) and build_reward_fn("length", Args).limit == 5
    fn = build_reward_fn("tests.fixture_envs:half_reward", Args)
    assert fn(None, "x", {}) == {"half": 0.5, "judge": None}
    with pytest.raises(KeyError, match="unknown reward 'lenght'"):
        build_reward_fn("lenght", Args)
    with pytest.raises(KeyError, match="cannot import"):
        build_reward_fn("tests.fixture_envs:nothing_here", Args)
