"""The multi-turn driver on a tiny model: token layout, masks, turn spans and scores."""
import argparse
import math

import pytest
import torch

from rl.rollout.episodes import run_episodes
from rl.engine.models import load_tokenizer
from rl.rollout.samplers import SamplerSettings, make_sampler
from tests.fixture_envs import DigitFractionEnv
from tests.helpers import default_args


def episode_args(max_turns):
    return argparse.Namespace(max_turns=max_turns, max_prompt_seq_len=128, max_answer_seq_len=8, temperature=1.0,
                              top_p=1.0, top_k=0)


@pytest.fixture(scope="module")
def played(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    tok = load_tokenizer(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    rows = DigitFractionEnv.dataset("train", 3, seed=0)
    samples = [r for r in rows for _ in range(2)]
    verifier = DigitFractionEnv.make_verifier()
    envs = [DigitFractionEnv(verifier=verifier, max_turns=3) for _ in samples]
    batch = run_episodes(make_sampler(SamplerSettings.from_args(episode_args(3)), model, tok), tok, envs, samples,
                         torch.arange(3).repeat_interleave(2), lambda env, text: env.step(text), episode_args(3), {})
    return tok, batch


def test_decoded_sequence_is_the_chat_template_of_the_whole_conversation(played):
    tok, batch = played
    for i, conversation in enumerate(batch.conversations):
        decoded = tok.decode(batch.input_ids[i][batch.attention_mask[i].bool()])
        rendered = tok.apply_chat_template(conversation, tokenize=False)
        assert rendered.startswith(decoded)
        # all that is missing is the template's closing of the last assistant turn (the model's EOS is kept)
        assert rendered[len(decoded):] in ("\n", "<|im_end|>\n")


def test_mask_covers_exactly_the_model_tokens_of_each_turn(played):
    tok, batch = played
    for i, conversation in enumerate(batch.conversations):
        replies = [m["content"] for m in conversation if m["role"] == "assistant"]
        turns = int((~torch.isnan(batch.turn_scores[i])).sum())
        assert len(replies) == turns
        response = batch.input_ids[i, batch.prompt_len:]
        for k, reply in enumerate(replies):
            tokens = [t for t in response[batch.turn_ids[i] == k].tolist() if t != tok.eos_token_id]
            assert tok.decode(tokens) == reply  # the model's tokens, as sampled, are what the env saw
        assert torch.equal(batch.response_mask[i].bool(), batch.turn_ids[i] >= 0)
        feedback = tok.decode(response[(batch.turn_ids[i] < 0) & batch.attention_mask[i, batch.prompt_len:].bool()])
        assert feedback.count("try again") == turns - 1


def test_turn_scores_are_the_verifier_scores_and_nan_after_the_end(played):
    _, batch = played
    for i, conversation in enumerate(batch.conversations):
        replies = [m["content"] for m in conversation if m["role"] == "assistant"]
        for k in range(3):
            if k < len(replies):
                expected = sum(c.isdigit() for c in replies[k]) / max(len(replies[k]), 1)
                assert batch.turn_scores[i, k].item() == pytest.approx(expected)
            else:
                assert math.isnan(batch.turn_scores[i, k].item())


def test_a_solved_episode_stops_and_a_failed_step_ends_it(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    from envs.base import StepResult
    tok = load_tokenizer(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    samples = DigitFractionEnv.dataset("train", 2, seed=0)
    envs = [DigitFractionEnv(verifier=lambda p, t, s: 1.0, max_turns=3),
            DigitFractionEnv(verifier=lambda p, t, s: 0.0, max_turns=3)]

    def step(env, text):
        return env.step(text) if env is envs[0] else StepResult(observation=[], score=0.0, done=True)
    batch = run_episodes(make_sampler(SamplerSettings.from_args(episode_args(3)), model, tok), tok, envs, samples, torch.tensor([0, 1]), step,
                         episode_args(3), {})
    assert batch.turn_scores[0].tolist()[0] == 1.0 and math.isnan(batch.turn_scores[0, 1].item())
    assert batch.turn_scores[1, 0].item() == 0.0 and math.isnan(batch.turn_scores[1, 1].item())


def _scorer_args(env):
    return default_args(env=env, answer_key="answer", prompt_key="problem", code_workers=1,
                              reward_funcs=["correctness"], max_turns=1, traj_score="final", reward_weights=None)


def _play_one_turn(model_dir, env_name, guarded: bool):
    """One episode per row of `env_name` through the trainer's guarded step (Scorer.safe_step) or a bare one."""
    from transformers import AutoModelForCausalLM
    from envs import env_class
    from rl.scoring import Scorer, ScoringSettings
    tok = load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    scorer = Scorer(ScoringSettings.from_args(_scorer_args(env_name)))
    samples = env_class(env_name).dataset("train", 2, seed=0)
    envs = [scorer.new_env() for _ in samples]
    step_fn = scorer.safe_step if guarded else (lambda env, text: env.step(text))
    return run_episodes(make_sampler(SamplerSettings.from_args(episode_args(1)), model, tok), tok, envs, samples, torch.arange(2), step_fn,
                        episode_args(1), {})


def test_reset_returning_a_str_is_refused_naming_the_env_class_and_method(tiny_model_dir):
    from rl.rollout.env_contract import EnvContractError
    with pytest.raises(EnvContractError, match=r"StrResetEnv\.reset returned str '.*'; reset\(sample\) must return"):
        _play_one_turn(tiny_model_dir, "tests.fixture_envs:StrResetEnv", guarded=True)


@pytest.mark.parametrize("guarded", [True, False])
def test_step_returning_a_float_is_refused_even_under_the_reward_guard(tiny_model_dir, guarded):
    # under the trainer's guard a raising step is scored 0 and the run goes on: the contract error must still stop it
    from rl.rollout.env_contract import EnvContractError
    with pytest.raises(EnvContractError, match=r"FloatStepEnv\.step returned float .*; step\(model_text\) must return "
                                               r"envs\.base\.StepResult"):
        _play_one_turn(tiny_model_dir, "tests.fixture_envs:FloatStepEnv", guarded=guarded)


def test_step_results_components_and_numeric_info_reach_the_env_metrics(tiny_model_dir):
    from rl.log.step_metrics import env_metrics
    batch = _play_one_turn(tiny_model_dir, "tests.fixture_envs:PartsEnv", guarded=True)
    digits = [sum(c.isdigit() for c in t) / max(len(t), 1) for t in batch.completions]
    metrics = env_metrics(batch.env_values)
    assert metrics["env/digits/mean"] == pytest.approx(sum(digits) / 2)
    assert metrics["env/brevity/mean"] == 1.0
    assert metrics["env/info/chars/mean"] == pytest.approx(sum(len(t) for t in batch.completions) / 2)
    assert metrics["env/info/solved/mean"] == pytest.approx(sum(d >= 1.0 for d in digits) / 2)
    assert not any("note" in k for k in metrics)
    assert not any("step" in vars(env) for env in batch.envs)  # the contract check is gone once the episode ends


def test_a_key_reported_on_some_turns_is_averaged_over_those_turns():
    from rl.log.step_metrics import env_metrics
    values = [[{"correctness": 0.0, "info/hint": 1.0}, {"correctness": 1.0}], [{"correctness": 0.5}]]
    assert env_metrics(values) == {"env/correctness/mean": 0.5, "env/info/hint/mean": 1.0}
