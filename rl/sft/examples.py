"""Supervised examples: a data row -> chat messages -> token ids with a loss mask on the assistant's tokens only, and
packing of several examples into one row. Tokenizer and list functions only (no model, no DeepSpeed).

Row formats (TRL's dataset formats, plus credo's envs):
- conversational: {"messages": [{"role": ..., "content": ...}, ...]}; every assistant turn is trained (TRL's
  `assistant_only_loss`);
- prompt-completion: {"prompt": str | messages, "completion": str | messages}; only the completion is trained (TRL's
  `completion_only_loss`); a string prompt is one user message, a string completion one assistant message;
- an env's own rows (e.g. BFCL's {"question", "function", "ground_truth"}) with --env: the env's `sft_messages(row)`
  (envs/base.py) turns them into prompt-completion form.

The mask (credo's reading of what TRL's `{% generation %}` blocks mark): an assistant turn's tokens are those the
chat template renders after the generation prompt, up to and including the template's end-of-turn token (the EOS
the decode loop stops at); text the template adds after that token (ChatML's newline) is context, not trained.
Tokens are what RL sees: the context up to the generation prompt tokenized as one text, then the assistant's text
tokenized on its own, as the sampler's tokens follow the prompt's in a rollout (rl/rollout/tokens.py).
"""
from rl.rollout.tokens import TemplateMismatch, template_name

ROLES = ("system", "user", "assistant", "tool")


class ExampleError(ValueError):
    """A row that cannot become a supervised example; the message says what is wrong (the loader adds where)."""


def _as_messages(value, role: str, field: str, text_allowed: bool = True) -> list:
    if isinstance(value, str) and text_allowed:
        return [{"role": role, "content": value}]
    if isinstance(value, list) and value and all(isinstance(m, dict) and m.get("role") in ROLES
                                                 and isinstance(m.get("content"), str) for m in value):
        return [{"role": m["role"], "content": m["content"]} for m in value]
    raise ExampleError(f"{field!r} must be a string or a list of {{role, content}} messages (roles "
                       f"{', '.join(ROLES)}), got {type(value).__name__}")


def row_conversation(row: dict, env=None) -> tuple:
    """(messages, trained) for one row: the chat, and per message whether its tokens carry the loss.

    `env`: an envs.base.Env instance for rows in the env's own layout (its `sft_messages`); used only when the row is
    neither conversational nor prompt-completion."""
    if not isinstance(row, dict):
        raise ExampleError(f"expected a JSON object, got {type(row).__name__}")
    if "messages" in row:
        messages = _as_messages(row["messages"], "user", "messages", text_allowed=False)
        trained = [m["role"] == "assistant" for m in messages]
    elif "prompt" in row and "completion" in row:
        prompt = _as_messages(row["prompt"], "user", "prompt")
        completion = _as_messages(row["completion"], "assistant", "completion")
        messages, trained = prompt + completion, [False] * len(prompt) + [m["role"] == "assistant" for m in completion]
    elif env is not None:
        try:
            prompt, completion = env.sft_messages(row)
        except (KeyError, TypeError) as exc:
            raise ExampleError(f"--env {type(env).__name__} could not make a supervised example of this row "
                               f"({type(exc).__name__}: {exc}); keys: {', '.join(map(str, row))}") from exc
        messages, trained = prompt + completion, [False] * len(prompt) + [True] * len(completion)
    else:
        raise ExampleError(f"a row needs 'messages', or 'prompt' and 'completion', or an --env whose rows these are "
                           f"(keys: {', '.join(map(str, row)) or 'none'})")
    if not any(trained):
        raise ExampleError("the row has no assistant message to train on")
    return messages, trained


def _render(tokenizer, messages: list, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _encode(tokenizer, text: str) -> list:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def tokenize_conversation(tokenizer, messages: list, trained: list, eos_ids) -> tuple:
    """(input_ids, loss_mask) lists of equal length: loss_mask 1 on the trained assistant turns' tokens through their
    end-of-turn token (module docstring). Raises TemplateMismatch when the chat template re-renders an earlier part
    of the chat once a later message is added (then no token can be told to belong to one turn)."""
    ids, mask, rendered = [], [], ""
    eos = set(eos_ids)
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], True) if i else _render(tokenizer, [], True)
        after = _render(tokenizer, messages[:i + 1], False)
        if not before.startswith(rendered) or not after.startswith(before):
            raise TemplateMismatch(f"{template_name(tokenizer)} renders the chat before assistant message {i} "
                                   f"differently once that message is added, so its tokens cannot be told apart "
                                   f"(credo trains assistant turns of templates that only append)")
        context = _encode(tokenizer, before[len(rendered):])
        turn = _encode(tokenizer, after[len(before):])
        end = next((j + 1 for j, t in enumerate(turn) if t in eos), len(turn))  # through the end-of-turn token
        ids += context + turn
        mask += [0] * len(context) + [int(trained[i])] * end + [0] * (len(turn) - end)
        rendered = after
    return ids, mask


def truncate(ids: list, mask: list, max_len: int) -> tuple:
    """Keep the first max_len tokens (DeepSpeed-Chat's truncation: the end of an over-long example is dropped)."""
    return ids[:max_len], mask[:max_len]


def pack(examples: list, max_len: int) -> list:
    """Best-fit-decreasing packing (TRL's packing_strategy="bfd"): examples, longest first, each into the fullest
    row it still fits; a row is {"input_ids", "loss_mask", "position_ids"} with positions restarting at 0 for each
    example, so attention stays within an example (transformers builds a block-diagonal mask from such positions when
    no attention mask is given). Examples are {"input_ids", "loss_mask"} of at most max_len tokens. Deterministic."""
    order = sorted(range(len(examples)), key=lambda i: (-len(examples[i]["input_ids"]), i))
    rows, free = [], []
    for i in order:
        n = len(examples[i]["input_ids"])
        fits = [r for r in range(len(rows)) if free[r] >= n]
        if fits:
            r = min(fits, key=lambda r: (free[r], r))
        else:
            rows.append({"input_ids": [], "loss_mask": [], "position_ids": []})
            free.append(max_len)
            r = len(rows) - 1
        rows[r]["input_ids"] += examples[i]["input_ids"]
        rows[r]["loss_mask"] += examples[i]["loss_mask"]
        rows[r]["position_ids"] += list(range(n))
        free[r] -= n
    return rows
