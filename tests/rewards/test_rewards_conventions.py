import pytest

from rewards.conventions import CREDO, TRL, chunks, reward_style, trl_kwargs


def test_the_issues_trl_reward_is_recognised_as_trl():
    def f(completions, **kwargs):
        return [1.0 for _ in completions]
    assert reward_style(f, "--reward_funcs m:f") == TRL


def test_credo_functions_and_callable_objects_are_credo_style():
    class Judge:
        def __call__(self, prompt, completion, sample):
            return 1.0
    assert reward_style(lambda prompt, completion, sample: 1.0, "x") == CREDO
    assert reward_style(Judge(), "x") == CREDO


def test_a_signature_that_fits_neither_convention_names_the_function_and_its_signature():
    def judge(prompt, completion):
        return 1.0
    with pytest.raises(ValueError, match=r"--reward_funcs m:judge: .*judge\(prompt, completion\) is neither"):
        reward_style(judge, "--reward_funcs m:judge")


def test_trl_kwargs_carry_the_dataset_columns_but_not_prompt_as_trl_does():
    kwargs = trl_kwargs(["p1", "p2"], ["c1", "c2"], [[1], [2, 3]],
                        [{"prompt": "p1", "answer": "4", "level": 1}, {"prompt": "p2", "answer": "5", "level": 2}],
                        step=7, max_steps=10)
    assert kwargs["answer"] == ["4", "5"] and kwargs["level"] == [1, 2] and "prompt" not in kwargs
    assert kwargs["prompts"] == ["p1", "p2"] and kwargs["completion_ids"] == [[1], [2, 3]]
    assert kwargs["trainer_state"].global_step == 7 and kwargs["trainer_state"].max_steps == 10


def test_chunks_cover_the_batch_in_order_without_empty_pieces():
    assert chunks(8, 3) == [(0, 3), (3, 6), (6, 8)]
    assert chunks(2, 8) == [(0, 1), (1, 2)]
