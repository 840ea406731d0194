"""Training prompts: rows from an env's generator or a JSONL file, served in seeded, resumable order."""
import json
import logging
import random

from envs import env_class

logger = logging.getLogger(__name__)


class DataError(ValueError):
    """Bad input data, with the file, line and key in the message."""


def _parse_row(path: str, lineno: int, raw: bytes, required_keys: tuple):
    """The row of one JSONL line, None for a blank line; DataError naming file, line and key if it is bad."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{lineno}: malformed JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
    for key in required_keys:
        if key not in row or row[key] is None:
            raise DataError(f"{path}:{lineno}: missing key {key!r}")
    if not str(row[required_keys[0]]).strip():
        raise DataError(f"{path}:{lineno}: empty prompt in key {required_keys[0]!r}")
    return row


def load_jsonl_rows(path: str, required_keys: tuple, skip_bad_rows: bool = False) -> list:
    """Rows of a JSONL file, each checked for the keys training needs (the first is the prompt: non-empty).

    Raises DataError naming the file, the 1-based line and the key at the first bad row, or with
    skip_bad_rows drops bad rows and logs how many (and the first few reasons).
    """
    rows, bad = [], []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                row = _parse_row(path, lineno, raw, required_keys)
            except DataError as exc:
                if not skip_bad_rows:
                    raise
                bad.append(str(exc))
                continue
            if row is not None:
                rows.append(row)
    if bad:
        logger.warning("--skip_bad_rows: skipped %d bad row(s) of %s; first: %s", len(bad), path, "; ".join(bad[:3]))
    if not rows:
        raise DataError(f"{path}: no usable rows" + (f" ({len(bad)} bad)" if bad else ""))
    return rows


def training_rows(args) -> list:
    if args.data_path is not None:
        return load_jsonl_rows(args.data_path, (args.prompt_key, args.answer_key), args.skip_bad_rows)
    rows = env_class(args.env).dataset("train", args.num_train_samples, args.seed)
    if rows is None:
        raise DataError(f"--env {args.env} generates no data of its own: pass --data_path")
    return rows


class PromptStream:
    """Global batches of prompts in a seeded order, reshuffled each epoch; position is part of the state.

    Every rank holds the same order and takes its own slice of each global batch, so a step's prompts are
    disjoint across ranks and group ids (global row positions) are unique.
    """

    def __init__(self, rows: list, seed: int):
        self.rows, self.seed = rows, seed
        self.position = 0  # rows consumed so far, over all epochs

    def _order(self, epoch: int) -> list:
        if getattr(self, "_cached_epoch", None) != epoch:
            order = list(range(len(self.rows)))
            random.Random(self.seed * 100003 + epoch).shuffle(order)
            self._cached_epoch, self._cached_order = epoch, order
        return self._cached_order

    def next_batch(self, global_batch: int, rank: int, per_rank: int):
        """Return (rows for this rank, their global ids) and advance by one global batch."""
        ids = [self.position + rank * per_rank + i for i in range(per_rank)]
        n = len(self.rows)
        picked = [self.rows[self._order(i // n)[i % n]] for i in ids]
        self.position += global_batch
        return picked, ids

    def state_dict(self) -> dict:
        return {"position": self.position, "seed": self.seed, "num_rows": len(self.rows)}

    def load_state_dict(self, state: dict):
        if state["num_rows"] != len(self.rows):
            raise DataError(f"resumed data has {len(self.rows)} rows, the checkpoint was trained on {state['num_rows']}")
        self.position = state["position"]
