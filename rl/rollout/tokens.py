"""Token layout shared by generation, the episode driver and the log-prob forwards: chat-template encoding, left
padding, EOS handling, and the tokens a multi-turn episode appends after a sampled turn. Plain tensor and list
functions (no model, no DeepSpeed)."""
import jinja2
import torch

from rewards.lm_tensors import left_pad  # noqa: F401 (re-exported: generation pads with it)


def encode_prompts(tokenizer, conversations: list, max_prompt_seq_len: int):
    """Left-padded chat-template encoding. Over-long prompts keep their end (where the question is).

    Returns (input_ids Tensor[B, P], attention_mask Tensor[B, P]).
    """
    texts = [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
    tokenizer.padding_side, tokenizer.truncation_side = "left", "left"
    enc = tokenizer(texts, padding=True, truncation=True, max_length=max_prompt_seq_len, add_special_tokens=False,
                    return_tensors="pt")
    return enc["input_ids"], enc["attention_mask"]


def response_mask_from_ids(response_ids: torch.Tensor, eos_token_ids) -> torch.Tensor:
    """1 on generated tokens up to and including the first EOS, 0 after. Tensor[B, R] long -> Tensor[B, R] float."""
    is_eos = torch.zeros_like(response_ids, dtype=torch.bool)
    for eos in eos_token_ids:
        is_eos |= response_ids == eos
    eos_before = torch.cumsum(is_eos.long(), dim=1) - is_eos.long()  # EOS tokens strictly before each position
    return (eos_before == 0).float()


def eos_ids(tokenizer, model_config) -> list:
    """Every id that ends a turn: the tokenizer's EOS and the model's generation_config EOS ids (sorted)."""
    ids = {tokenizer.eos_token_id}
    gen_eos = getattr(getattr(model_config, "generation_config", None), "eos_token_id", None)
    for e in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]):
        if e is not None:
            ids.add(e)
    return sorted(i for i in ids if i is not None)


# Stands in for the sampled turn when the chat template renders the messages that follow it: plain ASCII, so that
# a template that trims, escapes or splits an assistant's content (Llama 3 trims it, Qwen3 splits at </think>)
# still renders it verbatim, and unlikely to occur in real text.
TURN_PLACEHOLDER = "credo0turn0placeholder"


class TemplateMismatch(ValueError):
    """The chat template does not render an assistant turn's content verbatim, so the tokens of the messages after
    it cannot be told apart from the turn itself."""


def template_name(tokenizer) -> str:
    return f"the chat template of {tokenizer.name_or_path or type(tokenizer).__name__}"


def next_turn_tokens(tokenizer, history: list, new_messages: list, sampled: list, eos_text: dict, turn: int) -> list:
    """The tokens appended after a sampled turn: the template's closing of that assistant turn (less the EOS the
    model sampled), the env's new messages, and the generation prompt of the next turn.

    Token-in, token-out: the sampled tokens stay as drawn and nothing earlier is re-rendered, so a template that
    renders past turns differently from how the model wrote them (Qwen3 drops earlier turns' <think> reasoning;
    Llama 3 trims whitespace) still gives the model, at turn k + 1, exactly the sequence the trainer scores.

    The new messages are rendered after a placeholder assistant turn and cut at the end of its content: the suffix
    diff after a dummy assistant turn that verl's continuous-token RFC describes (verl-project/verl issue #6719).
    verl's ToolAgentLoop instead renders the new messages alone and strips the template's default system prompt
    (`remove_system_prompt=True`), which loses the newline ChatML puts after <|im_end|> at every turn (verl issue
    #6501; fixed by its PR #6921). Cutting after the placeholder keeps it, so on a template that re-renders as a
    prefix (SmolLM2's) these are the tokens credo's earlier re-rendering driver appended.

    Args:
        history: the conversation before the sampled turn (the opening messages and every earlier turn, as text).
        new_messages: the env's observation messages that follow the sampled turn.
        sampled: the token ids the model drew this turn (through its EOS, or cut at --max_answer_seq_len).
        eos_text: {EOS id: its text}. A turn that ended with an EOS whose text opens the template's closing (after
            whitespace) gets the rest of the closing; any other turn (cut short, or ended by another EOS) keeps what
            it drew and gets the whole closing after it.
        turn: the 0-based index of the sampled turn, for the error message.
    Raises:
        TemplateMismatch (naming the template and the turn) where the template cannot render the conversation or does
        not render the placeholder content exactly once.
    """
    messages = list(history) + [{"role": "assistant", "content": TURN_PLACEHOLDER}] + list(new_messages)
    where = f"{template_name(tokenizer)} (after turn {turn + 1})"
    try:
        full = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except jinja2.TemplateError as exc:
        raise TemplateMismatch(f"{where} cannot render the env's next messages {new_messages!r}: {exc}") from exc
    if full.count(TURN_PLACEHOLDER) != 1:
        raise TemplateMismatch(
            f"{where} does not render an assistant turn's content verbatim (a placeholder content appears "
            f"{full.count(TURN_PLACEHOLDER)} times in its rendering, not once), so the tokens of the messages that "
            "follow the turn cannot be cut from it; multi-turn rollouts need a template that writes the assistant's "
            "text as given")
    tail = full[full.index(TURN_PLACEHOLDER) + len(TURN_PLACEHOLDER):]
    end = eos_text.get(sampled[-1]) if sampled else None
    before, found, after = tail.partition(end) if end else ("", "", tail)
    if found and not before.strip():  # the sampled EOS stands for the closing through the template's EOS (Llama 2
        tail = after                  # and Mistral close with " </s>": the space is not added after the model's EOS)
    return tokenizer(tail, add_special_tokens=False)["input_ids"]
