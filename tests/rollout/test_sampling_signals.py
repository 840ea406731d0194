"""rl/rollout/sampling_signals.py: what the decode loop records while it samples (log-probs, entropy, the last hidden state)
equals what the no-grad forwards it replaces compute, so TCPO's surprisal and MAESTRO's `ent` / Conductor input
need no forward of their own and their maths is unchanged."""
import argparse

import pytest
import torch

from rewards.policy_rewards import PolicyRewards, PolicyRewardSettings
from rewards.policy_signals import entropy_and_last_hidden
from rl.update.batching import batched_response_logprobs
from rl.methods.tcpo_counterfactuals import counterfactuals, turn_surprisal
from rl.rollout.decode import sample_batch, sample_batch_with_signals
from rl.rollout.episodes import run_episodes
from rl.engine.models import load_tokenizer
from rl.rollout.samplers import SamplerSettings, make_sampler
from rl.rollout.tokens import left_pad
from tests.fixture_envs import DigitFractionEnv

TEMPERATURE = 0.7
TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), load_tokenizer(tiny_model_dir)


def run_args(**overrides):
    values = dict(max_turns=3, max_prompt_seq_len=128, max_answer_seq_len=10, temperature=TEMPERATURE, top_p=1.0,
                  top_k=0, tcpo_cf_budget=5, tcpo_cf_select="topl", tcpo_cf_samples=4, tcpo_tau=1.0,
                  tcpo_first_turn_prior="zero")
    values.update(overrides)
    return argparse.Namespace(**values)


def play(model, tok, signals, seed=0, groups=4, group_size=3):
    """3-turn episodes that play every turn (TCPO's protocol), the sampler recording `signals`."""
    args = run_args()
    rows = DigitFractionEnv.dataset("train", groups, seed=0)
    samples = [r for r in rows for _ in range(group_size)]
    verifier = DigitFractionEnv.make_verifier()
    envs = [DigitFractionEnv(verifier=verifier, max_turns=3, episode_end="max_turns") for _ in samples]
    torch.manual_seed(seed)
    return run_episodes(make_sampler(SamplerSettings.from_args(args), model, tok), tok, envs, samples,
                        torch.arange(groups).repeat_interleave(group_size), lambda env, text: env.step(text), args, {},
                        signals=signals)


class ForwardCounter:
    """Counts the model's full-sequence forwards (use_cache=False: the training-side passes, not decode steps)."""

    def __init__(self, model):
        self.count = 0
        self.handle = model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        self.count += kwargs.get("use_cache") is False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def test_decode_loop_signals_equal_a_forward_over_the_sampled_tokens(tiny):
    """Per token: log softmax(logits / T) of the drawn token and the entropy, from the raw logits (top-k does not
    change them, as it does not in the training forward); the hidden state after each row's last token; and the
    same tokens as without signals under the same seed (the recording draws no random numbers)."""
    model, tok = tiny
    contexts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14], [15]]
    ids, mask = left_pad(contexts, tok.pad_token_id, "cpu")
    eos = [tok.eos_token_id, 20]  # a common token as a second EOS, so that rows end at different steps
    torch.manual_seed(3)
    plain = sample_batch(model, ids, mask, 12, eos, TEMPERATURE, top_k=20)
    torch.manual_seed(3)
    tokens, recorded = sample_batch_with_signals(model, ids, mask, 12, eos, TEMPERATURE, top_k=20,
                                                 signals={"logp", "entropy", "hidden"})
    assert tokens == plain
    assert len({len(t) for t in tokens}) > 1  # rows did end at different steps
    for context, response, sig in zip(contexts, tokens, recorded):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([context + response]), output_hidden_states=True)
        logits = out.logits[0, len(context) - 1:-1].float() / TEMPERATURE
        logp = torch.log_softmax(logits, -1)
        want_logp = logp.gather(-1, torch.tensor(response)[:, None]).squeeze(-1)
        want_entropy = -(logp.exp() * logp).sum(-1)
        torch.testing.assert_close(torch.tensor(sig.logp), want_logp, **TOL)
        torch.testing.assert_close(torch.tensor(sig.entropy), want_entropy, **TOL)
        torch.testing.assert_close(sig.hidden, out.hidden_states[-1][0, -1], **TOL)


def test_turn_surprisal_from_the_sampling_pass_equals_the_forward_pass(tiny):
    """TCPO's surprisal (mean NLL of each turn's tokens) over 3-turn episodes: from the recorded log-probs, as from
    the no-grad forward the counterfactuals used to make."""
    model, tok = tiny
    batch = play(model, tok, {"logp"})
    assert batch.signals is not None and batch.signals.last_hidden is None  # only what was asked for
    forward = batched_response_logprobs(model, batch.input_ids, batch.attention_mask, batch.prompt_len, TEMPERATURE,
                                        micro=16)
    recorded = batch.signals.logp
    mask = batch.response_mask.bool()
    assert (recorded[~mask] == 0).all()  # feedback and padding carry nothing
    torch.testing.assert_close(recorded[mask], forward[mask], **TOL)
    want = turn_surprisal(forward, batch.turn_ids, 3)
    got = turn_surprisal(recorded, batch.turn_ids, 3)
    assert torch.isfinite(got[:, 1]).any()
    torch.testing.assert_close(got, want, equal_nan=True, **TOL)


def test_counterfactuals_choose_the_same_turns_and_scores_without_the_surprisal_forward(tiny):
    """Under one seed the counterfactuals from the recorded log-probs pick the same turns and give the same scores
    as the old forward path (batch.signals None), and make no full-sequence forward: only the alternatives'
    generate runs."""
    model, tok = tiny
    args = run_args()
    batch = play(model, tok, {"logp"}, seed=1)
    sampler = make_sampler(SamplerSettings.from_args(args), model, tok)
    score = lambda env, text, turn: env.score_turn_at(turn, text)  # noqa: E731
    recorded = batch.signals

    batch.signals = None  # the old path: a no-grad forward for the surprisal
    torch.manual_seed(7)
    with ForwardCounter(model) as old_forwards:
        want, want_count = counterfactuals(model, sampler, tok, batch, score, args, {})
    assert old_forwards.count > 0

    batch.signals = recorded
    torch.manual_seed(7)
    with ForwardCounter(model) as new_forwards:
        got, count = counterfactuals(model, sampler, tok, batch, score, args, {})
    assert new_forwards.count == 0
    assert count == want_count == args.tcpo_cf_budget
    assert torch.isfinite(want).any()
    torch.testing.assert_close(got, want, equal_nan=True)


def test_ent_reward_and_conductor_state_from_the_sampling_pass_equal_the_forward(tiny):
    """MAESTRO's `ent` (mean token entropy over every model token of the trajectory) and the Conductor's input
    (the final hidden state after the last token): from the sampling pass, with no forward, as from the forward."""
    model, tok = tiny
    batch = play(model, tok, {"entropy", "hidden"}, seed=2)
    settings = PolicyRewardSettings(format_style="boxed", reward_model_name_or_path=None,
                                    per_device_train_micro_batch_size=4, temperature=TEMPERATURE, len_min=5,
                                    len_max=20, answer_key="answer")
    rewards = PolicyRewards(["ent", "fmt", "len"], settings, model, tok)
    assert rewards.sampling_signals == {"entropy", "hidden"}
    with ForwardCounter(model) as forwards:
        raw, hidden = rewards.raw(batch)
    assert forwards.count == 0
    want_entropy, want_hidden = entropy_and_last_hidden(model, batch.input_ids, batch.attention_mask,
                                                        batch.prompt_len, batch.response_mask, TEMPERATURE)
    torch.testing.assert_close(raw["ent"], want_entropy, **TOL)
    torch.testing.assert_close(hidden, want_hidden, **TOL)
    batch.signals = None  # the old path gives the same rewards
    old_raw, old_hidden = rewards.raw(batch)
    for name in raw:
        torch.testing.assert_close(raw[name], old_raw[name], **TOL)
    torch.testing.assert_close(hidden, old_hidden, **TOL)


def test_samplers_without_a_decode_loop_record_nothing_and_consumers_fall_back(tiny):
    """HF generate records no signals: the rollout has none, and TCPO / MAESTRO keep their own forwards."""
    model, tok = tiny
    sampler = make_sampler(SamplerSettings.from_args(run_args(decode_loop="hf_generate")), model, tok)
    tokens, _, recorded = sampler.generate_with_signals([[5, 6, 7]], {}, {"logp"})
    assert len(tokens) == 1 and recorded is None


def test_signals_that_no_longer_match_the_rollout_are_refused_not_misread(tiny):
    """Code that drops rows of a rollout (e.g. filtering constant groups) without its signals would credit one
    trajectory with another's surprisal: the consumers refuse it by name; SamplingSignals.select keeps them aligned."""
    from rl.methods.tcpo_counterfactuals import rollout_logprobs
    from rl.rollout.sampling_signals import checked_signals
    model, tok = tiny
    batch = play(model, tok, {"logp", "entropy", "hidden"}, seed=3, groups=2, group_size=2)
    full = batch.signals
    keep = torch.tensor([0, 2, 3])
    batch.input_ids, batch.attention_mask, batch.response_mask = (batch.input_ids[keep], batch.attention_mask[keep],
                                                                  batch.response_mask[keep])
    with pytest.raises(ValueError, match="SamplingSignals.select"):
        rollout_logprobs(model, batch, TEMPERATURE)
    settings = PolicyRewardSettings(format_style="boxed", reward_model_name_or_path=None,
                                    per_device_train_micro_batch_size=3, temperature=TEMPERATURE, len_min=5,
                                    len_max=20, answer_key="answer")
    batch.completions, batch.samples = [batch.completions[i] for i in keep], [batch.samples[i] for i in keep]
    with pytest.raises(ValueError, match="SamplingSignals.select"):
        PolicyRewards(["ent"], settings, model, tok).raw(batch)
    batch.signals = full.select(keep)
    assert checked_signals(batch) is batch.signals
    torch.testing.assert_close(rollout_logprobs(model, batch, TEMPERATURE), full.logp[keep])


def test_tcpo_surprisal_uses_vllms_log_probs_without_a_forward():
    """With --rollout_backend vllm the rollout has no decode-loop signals but carries vLLM's own log-probs of its
    tokens: TCPO's surprisal reads those instead of a no-grad forward of the actor (none is given here to run)."""
    from rl.methods.tcpo_counterfactuals import rollout_logprobs
    from rl.types import Rollout
    logp = -torch.rand(3, 5)
    batch = Rollout(input_ids=torch.zeros(3, 7, dtype=torch.long), attention_mask=torch.ones(3, 7, dtype=torch.long),
                    response_mask=torch.ones(3, 5), prompt_len=2, group_ids=torch.zeros(3), completions=[], samples=[])
    batch.rollout_logp = logp
    assert rollout_logprobs(None, batch, TEMPERATURE) is logp
