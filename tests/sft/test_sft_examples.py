"""rl/sft/examples.py and rl/sft/data.py: which tokens carry the SFT loss, row formats, packing, bad rows."""
import json

import pytest

from rl.rollout.data_files import DataError
from rl.rollout.tokens import TemplateMismatch, encode_prompts
from rl.sft.data import SFTDataSettings, make_examples, source_rows
from rl.sft.examples import ExampleError, pack, row_conversation, tokenize_conversation
from tests.helpers import build_char_tokenizer

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": "6, as 3+3=6"}]


def settings(**over):
    base = dict(data_path=None, data_split="train", env="arith", env_settings={}, num_train_samples=8,
                max_seq_len=512, packing=False, skip_bad_rows=False, seed=0)
    return SFTDataSettings(**{**base, **over})


def test_the_loss_covers_exactly_each_assistant_turn_and_its_end_token():
    # The character tokenizer makes one token per character, so the expected mask is written out by hand: the
    # ChatML text below, with 1 exactly under "4<|im_end|>" and "6, as 3+3=6<|im_end|>" (the newline after each
    # <|im_end|> is the template's, not the assistant's).
    tok = build_char_tokenizer()
    messages, trained = row_conversation({"messages": CHAT})
    ids, mask = tokenize_conversation(tok, messages, trained, [tok.eos_token_id])
    pieces = [("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n", 0),
              ("4<|im_end|>", 1), ("\n<|im_start|>user\nand 3+3?<|im_end|>\n<|im_start|>assistant\n", 0),
              ("6, as 3+3=6<|im_end|>", 1), ("\n", 0)]
    expected_ids, expected_mask = [], []
    for text, on in pieces:
        piece = tok(text, add_special_tokens=False)["input_ids"]
        expected_ids += piece
        expected_mask += [on] * len(piece)
    assert ids == expected_ids
    assert mask == expected_mask
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == "4<|im_end|>6, as 3+3=6<|im_end|>"


def test_prompt_completion_trains_the_completion_only_not_few_shot_assistant_turns():
    tok = build_char_tokenizer()
    row = {"prompt": CHAT[:4], "completion": "6"}  # the prompt's own assistant turn ("4") is a worked example
    messages, trained = row_conversation(row)
    ids, mask = tokenize_conversation(tok, messages, trained, [tok.eos_token_id])
    assert tok.decode([i for i, m in zip(ids, mask) if m]) == "6<|im_end|>"


def test_an_env_row_trains_on_the_prompt_rl_will_sample_from():
    from envs.arith import ArithEnv
    tok = build_char_tokenizer()
    env = ArithEnv()
    row = ArithEnv.dataset("train", 1, 0)[0]
    messages, trained = row_conversation(row, env)
    ids, mask = tokenize_conversation(tok, messages, trained, [tok.eos_token_id])
    prompt_ids, _ = encode_prompts(tok, [env.reset(row)], 512)
    first = mask.index(1)
    assert ids[:first] == prompt_ids[0].tolist()  # the context is token for token the rollout's prompt
    assert env.step(tok.decode(ids[first:-1]).removesuffix("<|im_end|>")).score == 1.0  # the target is right


@pytest.mark.parametrize("row, says", [({"text": "no chat here"}, "needs 'messages'"),
                                       ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant message"),
                                       ({"messages": "not a list"}, "list of {role, content}"),
                                       ({"prompt": "q", "completion": 3}, "'completion' must be")])
def test_a_row_that_cannot_be_an_example_says_why(row, says):
    with pytest.raises(ExampleError, match=says):
        row_conversation(row)


def test_a_template_that_rewrites_earlier_turns_is_refused():
    tok = build_char_tokenizer()
    # renders only the last message: adding a turn changes what was rendered before it
    tok.chat_template = "{{ messages[-1]['content'] if messages else '' }}{% if add_generation_prompt %}>{% endif %}"
    messages, trained = row_conversation({"messages": CHAT})
    with pytest.raises(TemplateMismatch):
        tokenize_conversation(tok, messages, trained, [tok.eos_token_id])


def test_packing_keeps_every_token_and_restarts_positions_per_example():
    examples = [{"input_ids": list(range(n)), "loss_mask": [1] * n} for n in (5, 3, 7, 2, 6)]
    rows = pack(examples, max_len=10)
    assert all(len(r["input_ids"]) <= 10 for r in rows)
    assert sum(len(r["input_ids"]) for r in rows) == 23 and len(rows) == 3  # 7+3, 6+2(+..), 5: best fit
    starts = sum(p == 0 for r in rows for p in r["position_ids"])
    assert starts == len(examples)
    assert sorted(x for r in rows for x in r["input_ids"]) == sorted(x for e in examples for x in e["input_ids"])


def test_a_bad_row_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "sft.jsonl"
    good = {"prompt": "q", "completion": "a"}
    path.write_text(json.dumps(good) + "\n" + json.dumps({"prompt": "q"}) + "\n")
    tok = build_char_tokenizer()
    s = settings(data_path=str(path), env="tests.fixture_envs:DigitFractionEnv")
    with pytest.raises(DataError, match=r"sft\.jsonl:2: "):
        make_examples(source_rows(s), tok, [tok.eos_token_id], s)
    examples, stats = make_examples(source_rows(s), tok, [tok.eos_token_id], settings(data_path=str(path),
                                                                                         skip_bad_rows=True))
    assert stats["bad_rows"] == 1 and len(examples) == 1


def test_an_example_cut_before_its_answer_is_dropped_and_counted():
    tok = build_char_tokenizer()
    rows = [("here", {"prompt": "x" * 40, "completion": "a"}, None), ("there", {"prompt": "q", "completion": "a"}, None)]
    examples, stats = make_examples(rows, tok, [tok.eos_token_id], settings(max_seq_len=30))
    assert stats["dropped_no_target"] == 1 and len(examples) == 1
