"""Token-in, token-out multi-turn rollouts over real chat templates (issue 49 item 3).

For a 3-turn episode under Qwen3's template (it drops past turns' reasoning when it re-renders), Llama 3's (it trims
each message) and SmolLM2's (credo's default model; it re-renders as a prefix), each in tests/rollout/chat_templates/
(SOURCES.md), the episode driver (rl/rollout/episodes.py) must give the trainer:
- every model token exactly as sampled, in its turn;
- a response mask on the policy's tokens only (not the env's feedback, the template's closings, or padding);
- for every turn, the context the sampler was given = the first tokens of the sequence the trainer scores, and
  the sampler's own log-probs = the trainer's forward over the laid-out batch;
- between two turns, the template's text for the env's message and the next generation prompt.
Tokenizers are character-level, built in code with each family's special tokens as single ids (as in the real
tokenizers); the policy is a random tiny Llama on that vocabulary, plus a scripted policy that writes what a random
model never does (Qwen3-style <think> reasoning, whitespace Llama 3 trims, a turn cut short, a second EOS id).
"""
import argparse
import os
import string
from dataclasses import dataclass

import pytest
import torch

from rl.rollout.episodes import run_episodes
from rl.rollout.samplers import SamplerSettings, make_sampler
from rl.rollout.tokens import TemplateMismatch, next_turn_tokens
from rl.update.batching import batched_response_logprobs
from tests.fixture_envs import DigitFractionEnv

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_templates")
TEMPERATURE = 1.0
TURNS = 3


@dataclass(frozen=True)
class Family:
    """A chat-template family as its real tokenizer and generation config have it."""
    template: str          # file in chat_templates/
    specials: tuple        # special tokens (single ids)
    eos: str               # tokenizer.eos_token: the template's closing of an assistant turn starts with it
    other_eos: str         # a second generation_config EOS id that is not the template's closing, or None
    pad: str               # tokenizer.pad_token (credo's load_tokenizer: the EOS where the model has none)
    bos: str               # tokenizer.bos_token (Llama 3's template writes it), or None
    next_turn: str         # the template's text after a closed turn: the user message {msg}, the generation prompt


CHATML_NEXT = "<|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n"
FAMILIES = {
    "qwen3": Family("qwen3.jinja", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), "<|im_end|>",
                    other_eos="<|endoftext|>", pad="<|endoftext|>", bos=None, next_turn="\n" + CHATML_NEXT),
    "llama3": Family("llama3.jinja", ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                      "<|end_header_id|>", "<|eot_id|>"), "<|eot_id|>", other_eos="<|end_of_text|>",
                     pad="<|eot_id|>", bos="<|begin_of_text|>",
                     next_turn="<|start_header_id|>user<|end_header_id|>\n\n{msg}<|eot_id|>"
                               "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    "smollm2": Family("smollm2.jinja", ("<|endoftext|>", "<|im_start|>", "<|im_end|>"), "<|im_end|>", other_eos=None,
                      pad="<|im_end|>", bos="<|im_start|>", next_turn="\n" + CHATML_NEXT),
}


def build_tokenizer(family: Family):
    """A character-level fast tokenizer with the family's special tokens, <think> and </think> (Qwen3 has them as
    added tokens) and its chat template read from chat_templates/."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", *family.specials]
    vocab = {tok: i for i, tok in enumerate(specials + ["<think>", "</think>"] + sorted(set(string.printable)))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    backend.add_special_tokens(specials)
    backend.add_tokens(["<think>", "</think>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", eos_token=family.eos,
                                  pad_token=family.pad, bos_token=family.bos)
    tok.padding_side = "left"
    with open(os.path.join(TEMPLATES, family.template)) as f:
        tok.chat_template = f.read()
    return tok


def build_policy(tok, family: Family):
    """A random 2-layer Llama on the tokenizer's vocabulary; its generation config ends a turn at every EOS id of
    the family (Qwen3: <|im_end|> and <|endoftext|>; Llama 3 Instruct: <|eot_id|> and <|end_of_text|>)."""
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                                         tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                                         eos_token_id=tok.eos_token_id))
    eos = [tok.convert_tokens_to_ids(t) for t in (family.eos, family.other_eos) if t]
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tok.pad_token_id
    return model.eval()


class Recording:
    """The run's real sampler, with every generate call's contexts and drawn tokens recorded (a spy: it changes
    nothing it passes on)."""

    def __init__(self, sampler):
        self.sampler, self.calls = sampler, []

    def __getattr__(self, name):
        return getattr(self.sampler, name)

    def generate_with_signals(self, contexts, timings, signals=frozenset()):
        tokens, logps, recorded = self.sampler.generate_with_signals(contexts, timings, signals)
        self.calls.append(([list(c) for c in contexts], [list(t) for t in tokens]))
        return tokens, logps, recorded


class ScriptedPolicy:
    """Stands in for a reasoning model where the test needs text that a random model never samples: row j's turn k
    draws scripts[j][k] (token ids). Records every call as Recording does."""
    lockstep, device = False, torch.device("cpu")

    def __init__(self, scripts, eos_ids):
        self.scripts, self.eos_ids, self.calls = scripts, eos_ids, []

    def generate_with_signals(self, contexts, timings, signals=frozenset()):
        turn = len(self.calls)
        tokens = [list(self.scripts[j][turn]) for j in range(len(contexts))]
        self.calls.append(([list(c) for c in contexts], tokens))
        return tokens, None, None


def sampling_args():
    return argparse.Namespace(max_turns=TURNS, max_prompt_seq_len=256, max_answer_seq_len=8, temperature=TEMPERATURE,
                              top_p=1.0, top_k=0)


def play(tok, sampler, rows: int, signals=frozenset()):
    """3-turn episodes on DigitFractionEnv, every turn played (TCPO's protocol)."""
    samples = DigitFractionEnv.dataset("train", rows, seed=0)
    verifier = DigitFractionEnv.make_verifier()
    envs = [DigitFractionEnv(verifier=verifier, max_turns=TURNS, episode_end="max_turns") for _ in samples]
    torch.manual_seed(0)
    return run_episodes(sampler, tok, envs, samples, torch.arange(rows), lambda env, text: env.step(text),
                        sampling_args(), {}, signals=signals)


def check_token_in_token_out(tok, family: Family, batch, calls) -> None:
    """The sampled tokens train as drawn; the mask covers them only; each turn's context is a prefix of the scored
    sequence; the tokens between turns are the template's closing (where the sampled EOS is not it), the env's
    message and the generation prompt."""
    assert len(calls) == TURNS
    for i in range(batch.input_ids.shape[0]):
        row = batch.input_ids[i][batch.attention_mask[i].bool()].tolist()  # what the trainer scores
        start = int(batch.attention_mask[i, :batch.prompt_len].sum())      # where the response part begins
        turn_ids = batch.turn_ids[i, :len(row) - start].tolist()
        on_policy = [False] * (len(row) - start)
        user_messages = [m["content"] for m in batch.conversations[i] if m["role"] == "user"][1:]
        for k, (contexts, drawn) in enumerate(calls):
            context, sampled = contexts[i], drawn[i]  # every row plays every turn: the calls keep row order
            assert context == row[:len(context)], f"row {i}: turn {k + 1}'s context is not what the trainer scores"
            span = range(len(context) - start, len(context) - start + len(sampled))
            assert row[len(context):len(context) + len(sampled)] == sampled, f"row {i}, turn {k + 1}: not as drawn"
            assert [turn_ids[p] for p in span] == [k] * len(sampled)
            for p in span:
                on_policy[p] = True
            if k + 1 < TURNS:
                between = row[len(context) + len(sampled):len(calls[k + 1][0][i])]
                closed = bool(sampled) and sampled[-1] == tok.convert_tokens_to_ids(family.eos)
                expected = ("" if closed else family.eos) + family.next_turn.format(msg=user_messages[k])
                assert tok.decode(between) == expected, f"row {i}: the tokens after turn {k + 1}"
            else:
                assert len(context) + len(sampled) == len(row)  # nothing follows the last turn
        mask = batch.response_mask[i, :len(row) - start].bool().tolist()
        assert mask == on_policy, f"row {i}: the response mask is not exactly the sampled tokens"
        assert not batch.response_mask[i, len(row) - start:].any()  # right padding


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_sampled_episode_trains_on_exactly_what_the_model_drew_and_saw(name):
    """The credo decode loop on a random tiny model (its text often starts or ends with whitespace, which Llama 3's
    template trims, and turns end at either EOS id or at --max_answer_seq_len)."""
    family = FAMILIES[name]
    tok = build_tokenizer(family)
    model = build_policy(tok, family)
    sampler = Recording(make_sampler(SamplerSettings.from_args(sampling_args()), model, tok))
    batch = play(tok, sampler, rows=4, signals={"logp"})
    check_token_in_token_out(tok, family, batch, sampler.calls)
    # the log-probs the sampler drew with = the trainer's forward over the laid-out batch: the same context, token
    # for token, at every turn
    forward = batched_response_logprobs(model, batch.input_ids, batch.attention_mask, batch.prompt_len, TEMPERATURE,
                                        micro=8)
    mask = batch.response_mask.bool()
    torch.testing.assert_close(batch.signals.logp[mask], forward[mask], rtol=1e-4, atol=1e-4)


def scripts_for(tok, family: Family) -> list:
    """Two rows of three scripted turns: reasoning closed by the template's EOS, whitespace Llama 3 trims, a turn
    cut short (no EOS), and a turn ended by the family's other EOS id."""
    def ids(text, end):
        return tok(text, add_special_tokens=False)["input_ids"] + ([tok.convert_tokens_to_ids(end)] if end else [])
    reasoning = "<think>\nThe digits are 3 and 4.\n</think>\n\n7"
    other = family.other_eos or family.eos
    return [[ids(reasoning, family.eos), ids("  twelve \n", None), ids(reasoning, family.eos)],
            [ids(reasoning, other), ids(" 8", family.eos), ids("9", other)]]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_reasoning_and_whitespace_the_template_would_rewrite_train_as_written(name):
    family = FAMILIES[name]
    tok = build_tokenizer(family)
    eos_ids = [tok.convert_tokens_to_ids(t) for t in (family.eos, family.other_eos) if t]
    policy = ScriptedPolicy(scripts_for(tok, family), eos_ids)
    batch = play(tok, policy, rows=2)
    check_token_in_token_out(tok, family, batch, policy.calls)
    decoded = tok.decode(batch.input_ids[0][batch.attention_mask[0].bool()])
    assert decoded.count("The digits are 3 and 4.") == 2  # both turns' reasoning, as the model wrote it
    rendered = tok.apply_chat_template(batch.conversations[0], tokenize=False)
    if name == "smollm2":  # re-renders as a prefix: the sequence is the template's text of the conversation
        assert rendered == decoded + "\n"
    else:  # re-rendering rewrites the history (the earlier driver refused these templates with TemplateMismatch)
        assert not rendered.startswith(decoded[:decoded.index("twelve")])
    if name == "qwen3":
        assert rendered.count("The digits are 3 and 4.") == 1  # Qwen3 keeps only the last turn's reasoning


def test_the_default_models_template_appends_what_re_rendering_the_history_appended():
    """SmolLM2's template re-renders as a prefix, so the tokens after each turn are those the earlier driver got by
    rendering the whole conversation again and cutting what it had rendered so far: the default model's rollouts
    are unchanged, token for token."""
    family = FAMILIES["smollm2"]
    tok = build_tokenizer(family)
    eos = tok.convert_tokens_to_ids(family.eos)
    eos_text = {eos: family.eos}
    conversation = [{"role": "user", "content": "What is 2 + 3?"}]
    rendered = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    for k, (text, closed) in enumerate([("5", True), ("It is 5.", False), ("  5 \n", True)]):
        sampled = tok(text, add_special_tokens=False)["input_ids"] + ([eos] if closed else [])
        feedback = [{"role": "user", "content": f"Check your work ({k})."}]
        got = next_turn_tokens(tok, conversation, feedback, sampled, eos_text, k)
        conversation = conversation + [{"role": "assistant", "content": text}] + feedback
        rendered += text + (family.eos if closed else "")
        full = tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        assert full.startswith(rendered)  # the earlier driver's condition
        assert got == tok(full[len(rendered):], add_special_tokens=False)["input_ids"]  # its tokens
        rendered = full


def test_a_closing_with_whitespace_before_the_eos_is_what_the_sampled_eos_stands_for():
    """Llama 2's template closes an assistant turn with ' ' + eos_token: a turn the model ended with its EOS goes on
    with the next user message, not with a second EOS; a turn cut short gets the whole closing."""
    family = Family("smollm2.jinja", ("<s>", "</s>"), "</s>", other_eos=None, pad="</s>", bos="<s>", next_turn="")
    tok = build_tokenizer(family)
    tok.chat_template = ("{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + "
                         "m['content'].strip() + ' [/INST]' }}{% else %}{{ ' ' + m['content'].strip() + ' ' + "
                         "eos_token }}{% endif %}{% endfor %}")
    eos = tok.convert_tokens_to_ids("</s>")
    history, feedback = [{"role": "user", "content": "2 + 3?"}], [{"role": "user", "content": "Try again."}]
    answer = tok("5", add_special_tokens=False)["input_ids"]
    closed = next_turn_tokens(tok, history, feedback, answer + [eos], {eos: "</s>"}, 0)
    assert tok.decode(closed) == "<s>[INST] Try again. [/INST]"
    cut = next_turn_tokens(tok, history, feedback, answer, {eos: "</s>"}, 0)
    assert tok.decode(cut) == " </s><s>[INST] Try again. [/INST]"


def test_a_template_that_does_not_write_the_assistants_text_is_refused_naming_it_and_the_turn():
    family = FAMILIES["smollm2"]
    tok = build_tokenizer(family)
    tok.name_or_path = "my-org/summarising-model"
    tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                         "{{ m['content'] if m['role'] != 'assistant' else '(answer)' }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    policy = ScriptedPolicy(scripts_for(tok, family), [tok.convert_tokens_to_ids(family.eos)])
    with pytest.raises(TemplateMismatch, match=r"the chat template of my-org/summarising-model \(after turn 1\) does "
                                               r"not render an assistant turn's content verbatim"):
        play(tok, policy, rows=2)


def test_a_template_that_cannot_render_the_next_message_is_refused_naming_it_and_the_turn():
    family = FAMILIES["smollm2"]
    tok = build_tokenizer(family)
    tok.chat_template = ("{% for m in messages %}{% if m['content'].startswith('That answer') %}"
                         "{{ raise_exception('feedback is not a role this template knows') }}{% endif %}"
                         "<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                         "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    policy = ScriptedPolicy(scripts_for(tok, family), [tok.convert_tokens_to_ids(family.eos)])
    with pytest.raises(TemplateMismatch, match=r"\(after turn 1\) cannot render the env's next messages .*"
                                               r"feedback is not a role this template knows"):
        play(tok, policy, rows=2)
