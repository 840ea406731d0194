"""The supervised data: rows of --data_path (any format rl/rollout/data_files.py reads) or an env's own train split,
made into token examples (rl/sft/examples.py), optionally packed. The trainer serves them in seeded, resumable order
through the PromptStream RL draws its prompts from (its position, record of consumed rows and content digest are
checkpointed, so a resume continues with the next example and refuses other data)."""
import json
import logging
from dataclasses import dataclass

from envs import env_class
from rl.rollout.data_files import DataError, data_paths, read_records
from rl.rollout.tokens import TemplateMismatch
from rl.sft.examples import ExampleError, pack, row_conversation, tokenize_conversation, truncate

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SFTDataSettings:
    """Where the examples come from and how they are cut (names as on sft.py's command line)."""
    data_path: str           # None: the env's own train split (Env.dataset("train", ...))
    data_split: str
    env: str                 # --env: the layout of env rows (its sft_messages), and its train split without data
    env_settings: dict       # the env's own flags (Env.settings_from_args)
    num_train_samples: int   # rows drawn from the env's train split when there is no --data_path
    max_seq_len: int
    packing: bool
    skip_bad_rows: bool
    seed: int


def _parse_json_field(row: dict) -> dict:
    """A CSV/TSV cell cannot hold a list: a `messages`, `prompt` or `completion` cell that holds a JSON list is read
    as one."""
    out = dict(row)
    for key in ("messages", "prompt", "completion"):
        value = out.get(key)
        if isinstance(value, str) and value.lstrip().startswith("[{"):
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError:
                pass
    return out


def source_rows(settings: SFTDataSettings, split: str = "train", path: str = None) -> list:
    """(location, row, error) of the data: --data_path's rows, or the env's own rows of `split`."""
    path = path if path is not None else settings.data_path
    if path is not None:
        return [(loc, _parse_json_field(row) if row is not None else None, err)
                for p in data_paths(path) for loc, row, err in read_records(p, settings.data_split)]
    rows = env_class(settings.env).dataset(split, settings.num_train_samples, settings.seed, **settings.env_settings)
    if rows is None:
        raise DataError(f"--env {settings.env} has no data of its own: pass --data_path (conversational or "
                        f"prompt-completion rows, or the env's rows)")
    return [(f"--env {settings.env} {split} row {i + 1}", row, None) for i, row in enumerate(rows)]


def make_examples(records: list, tokenizer, eos_ids, settings: SFTDataSettings, env=None) -> tuple:
    """(examples, stats): each row as {"input_ids", "loss_mask"} (truncated to max_seq_len), packed into rows of
    max_seq_len when settings.packing. A bad row stops with its location, or is skipped and counted under
    --skip_bad_rows; an example left with no trained token after truncation is dropped and counted."""
    examples, bad, empty, truncated = [], [], 0, 0
    for location, row, error in records:
        try:
            if error is not None:
                raise ExampleError(error)
            messages, trained = row_conversation(row, env)
            ids, mask = tokenize_conversation(tokenizer, messages, trained, eos_ids)
        except TemplateMismatch:
            raise
        except ExampleError as exc:
            if not settings.skip_bad_rows:
                raise DataError(f"{location}: {exc}") from None
            bad.append(f"{location}: {exc}")
            continue
        if len(ids) > settings.max_seq_len:
            truncated += 1
            ids, mask = truncate(ids, mask, settings.max_seq_len)
        if not any(mask):
            empty += 1
            continue
        examples.append({"input_ids": ids, "loss_mask": mask})
    if bad:
        logger.warning("--skip_bad_rows: skipped %d bad row(s); first: %s", len(bad), "; ".join(bad[:3]))
    if not examples:
        raise DataError(f"no usable supervised example ({len(bad)} bad rows, {empty} with no trained token within "
                        f"--max_seq_len {settings.max_seq_len})")
    stats = {"examples": len(examples), "bad_rows": len(bad), "truncated": truncated, "dropped_no_target": empty,
             "trained_tokens": sum(sum(e["loss_mask"]) for e in examples),
             "tokens": sum(len(e["input_ids"]) for e in examples)}
    if settings.packing:
        examples = pack(examples, settings.max_seq_len)
        stats["packed_rows"] = len(examples)
    return examples, stats

