"""Training prompts: rows from an env's generator or from --data_path (any format rl/rollout/data_files.py reads), each
checked for the keys the env needs, served in seeded, resumable order."""
import hashlib
import json
import logging
import math
import random
from dataclasses import dataclass

from envs import env_class
from rl.rollout.data_files import DataError, data_paths, read_records

__all__ = ["DataError", "DataSettings", "PromptStream", "check_first_row", "check_row", "load_rows", "training_rows",
           "validate_data_keys"]
logger = logging.getLogger(__name__)


def check_row(location: str, row, required_keys: tuple) -> dict:
    """`row` if it has every required key (the first, if any, is the prompt: non-empty); else DataError naming the
    location, the key and the keys the row does have."""
    if not isinstance(row, dict):
        raise DataError(f"{location}: expected a JSON object (a row of named fields), got {type(row).__name__}")
    for key in required_keys:
        value = row.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):  # NaN: an empty cell of a table
            has = ", ".join(repr(k) for k in row) or "none"
            raise DataError(f"{location}: missing key {key!r} (the row has keys: {has}; see --prompt_key / "
                            f"--answer_key)")
    if required_keys and not str(row[required_keys[0]]).strip():
        raise DataError(f"{location}: empty prompt in key {required_keys[0]!r}")
    return row


def load_rows(data_path: str, required_keys: tuple, split: str = "train", skip_bad_rows: bool = False,
              check=None) -> list:
    """Rows of --data_path (one path or a comma list, mixed in the order given), each checked by `check_row` and
    then by `check(location, row)` (an env's Env.check_row: the row to use, or ValueError).

    Raises DataError naming the file, the line (JSONL) or row (other formats) and the key at the first bad row, or
    with skip_bad_rows drops bad rows and logs how many (and the first few reasons).
    """
    rows, bad = [], []
    for path in data_paths(data_path):
        for location, row, error in read_records(path, split):
            try:
                if error is not None:
                    raise DataError(f"{location}: {error}")
                row = check_row(location, row, required_keys)
                if check is not None:
                    try:
                        row = check(location, row)
                    except DataError:
                        raise
                    except ValueError as exc:  # the env's message names the field; the location is added here
                        message = str(exc)
                        raise DataError(message if message.startswith(location) else f"{location}: {message}")
                rows.append(row)
            except DataError as exc:
                if not skip_bad_rows:
                    raise
                bad.append(str(exc))
    if bad:
        logger.warning("--skip_bad_rows: skipped %d bad row(s) of %s; first: %s", len(bad), data_path,
                       "; ".join(bad[:3]))
    if not rows:
        raise DataError(f"{data_path}: no usable rows" + (f" ({len(bad)} bad)" if bad else ""))
    return rows


def load_jsonl_rows(path: str, required_keys: tuple, skip_bad_rows: bool = False) -> list:
    """`load_rows` of one path (the name dates from when only JSONL was read; any format works)."""
    return load_rows(path, required_keys, skip_bad_rows=skip_bad_rows)


@dataclass(frozen=True)
class DataSettings:
    """The flags the training prompts come from (names as on the command line)."""
    env: str
    data_path: str          # None: the env generates its own rows
    data_split: str
    prompt_key: str
    answer_key: str
    skip_bad_rows: bool
    num_train_samples: int
    seed: int               # the generator's seed and the order's
    env_settings: dict      # the env's own flags (Env.settings_from_args), for its `dataset`

    @classmethod
    def from_args(cls, args) -> "DataSettings":
        return cls(env=args.env, data_path=args.data_path, data_split=getattr(args, "data_split", "train"),
                   prompt_key=args.prompt_key, answer_key=args.answer_key, skip_bad_rows=args.skip_bad_rows,
                   num_train_samples=args.num_train_samples, seed=args.seed,
                   env_settings=env_class(args.env).settings_from_args(args))


def training_rows(settings: DataSettings) -> list:
    env_cls = env_class(settings.env)
    if settings.data_path is not None:
        return load_rows(settings.data_path, env_cls.data_keys(settings.prompt_key, settings.answer_key),
                         settings.data_split, settings.skip_bad_rows, check=env_cls.check_row)
    rows = env_cls.dataset("train", settings.num_train_samples, settings.seed, **settings.env_settings)
    if rows is None:
        raise DataError(f"--env {settings.env} generates no data of its own: pass --data_path")
    return rows


def repeated_rows_warning(num_rows: int, global_batch: int, source: str) -> str | None:
    """A warning when one step's batch needs more prompts than the data holds: each row is then drawn more than
    once into the same step (as separate groups of the same prompt), which a user of a 4-row file did not expect."""
    if num_rows >= global_batch:
        return None
    return (f"{source} has {num_rows} rows and a step takes {global_batch} prompts (--per_device_generation_batch_size "
            f"x ranks): each row appears about {global_batch / num_rows:.1f} times in every step's batch")


class PromptStream:
    """Global batches of prompts in a seeded order, reshuffled each epoch; position is part of the state.

    Every rank holds the same order and takes its own slice of each global batch, so a step's prompts are
    disjoint across ranks and group ids (global row positions) are unique.

    `consumed` is the record of what the stream has handed out: the data row (its index in the training rows) of
    every prompt, all ranks' together, in order. It is checkpointed with the position, so each checkpoint says which
    prompts its run consumed (rl/run/checkpoint.py's trainer_state_of reads it), and a resume refuses data or a seed
    that would serve other rows at those positions than the checkpoint's run was served, and training rows whose
    contents differ from the checkpoint's (rows_sha256).
    """

    def __init__(self, rows: list, seed: int):
        self.rows, self.seed = rows, seed
        self.position = 0  # rows consumed so far, over all epochs
        self.consumed = []  # the data row of every prompt handed out, in order (len == position)
        self._digest = None

    def _order(self, epoch: int) -> list:
        if getattr(self, "_cached_epoch", None) != epoch:
            order = list(range(len(self.rows)))
            random.Random(self.seed * 100003 + epoch).shuffle(order)
            self._cached_epoch, self._cached_order = epoch, order
        return self._cached_order

    def row_at(self, position: int) -> int:
        """The data row (index in the training rows) served at a global position of the stream."""
        n = len(self.rows)
        return self._order(position // n)[position % n]

    def next_batch(self, global_batch: int, rank: int, per_rank: int):
        """Return (rows for this rank, their global ids) and advance by one global batch."""
        ids = [self.position + rank * per_rank + i for i in range(per_rank)]
        picked = [self.rows[self.row_at(i)] for i in ids]
        self.consumed.extend(self.row_at(i) for i in range(self.position, self.position + global_batch))
        self.position += global_batch
        return picked, ids

    def rows_sha256(self) -> str:
        """A digest of the training rows' contents (computed once): a resume on edited data is refused."""
        if self._digest is None:
            h = hashlib.sha256()
            for row in self.rows:  # a value JSON cannot write counts by its type: its repr may hold an address
                h.update(json.dumps(row, sort_keys=True, default=lambda v: type(v).__name__).encode() + b"\n")
            self._digest = h.hexdigest()
        return self._digest

    def state_dict(self) -> dict:
        return {"position": self.position, "seed": self.seed, "num_rows": len(self.rows),
                "consumed": list(self.consumed), "rows_sha256": self.rows_sha256()}

    def load_state_dict(self, state: dict):
        """Continue where `state` (a state_dict) left off. Raises DataError when this stream's data is not the
        data the state was made with: another row count, other row contents, or an order that would have served
        other rows (another --seed)."""
        if state["num_rows"] != len(self.rows):
            raise DataError(f"resumed data has {len(self.rows)} rows, the checkpoint was trained on {state['num_rows']}")
        if state.get("rows_sha256") not in (None, self.rows_sha256()):
            raise DataError(f"the training data's {len(self.rows)} rows differ in content from the data the checkpoint "
                            "was trained on (sha256 of the rows): its record of consumed prompts would name other "
                            "rows. Resume with the data it was trained on, or start afresh (--resume none or a new "
                            "--output_dir)")
        consumed = state.get("consumed")
        if consumed is None:  # a checkpoint from before the record: the order it was served is the seed's
            consumed = [self.row_at(i) for i in range(state["position"])]
        if len(consumed) != state["position"]:
            raise DataError(f"the checkpoint records {len(consumed)} consumed prompts at position {state['position']}")
        differ = next((i for i, row in enumerate(consumed) if row != self.row_at(i)), None)
        if differ is not None:
            raise DataError(f"prompt {differ} of the checkpoint's run was data row {consumed[differ]}; this run's "
                            f"order (--seed {self.seed}) serves row {self.row_at(differ)} there: resuming would train "
                            "on another sequence of prompts. Resume with the checkpoint's --seed")
        self.position, self.consumed = state["position"], list(consumed)


def reads_data_keys(env_cls) -> bool:
    """Whether the env reads the fields --prompt_key / --answer_key name (math, code, a user's env), or fixed fields
    of its own whatever they say (arith, arith_multi and mixed read `prompt` and `answer`; toolcall BFCL's)."""
    probe = ("\0prompt", "\0answer")  # field names no row has: an env that reads the flags asks for them
    return set(probe) <= set(env_cls.data_keys(*probe))


USER_ROWS_HINT = ("for your own question/answer rows use --env math --prompt_key Q --answer_key A (math-verify compares "
                  "the response's final answer with field A; README, \"Your own data, reward and env\")")


def validate_data_keys(args, env_cls, bad) -> None:
    """Refuse --prompt_key / --answer_key that the env would not read, naming the env that would; called before the
    env's defaults fill them in (None: not given), so that the run stops here, not with a KeyError after the model
    has loaded."""
    if reads_data_keys(env_cls):
        return
    given = [f"--{flag} {getattr(args, flag)}" for flag in ("prompt_key", "answer_key")
             if getattr(args, flag) is not None
             and getattr(args, flag) not in env_cls.data_keys(args.prompt_key, args.answer_key)]
    if given:
        fields = " and ".join(repr(k) for k in env_cls.data_keys(None, None))
        bad(f"--env {args.env} reads a row's {fields} fields whatever {' / '.join(given)} say"
            f"{'' if args.data_path else ' (and makes its own rows without --data_path)'}: {USER_ROWS_HINT}")


def check_first_row(args, env_cls, bad, data_flag: str = "data_path", split_flag: str = "data_split") -> None:
    """The first row of a JSONL --data_path, checked as loading would check every row, where the flags are parsed
    (a file read line by line costs nothing to peek at; other formats are checked when loaded). Not under
    --skip_bad_rows, whose first row may be one to skip."""
    path = getattr(args, data_flag, None)
    if path is None or getattr(args, "skip_bad_rows", False):
        return
    first = data_paths(path)[0]
    if not first.endswith((".jsonl", ".ndjson")):
        return
    for location, row, error in read_records(first, getattr(args, split_flag, "train")):
        try:
            if error is not None:
                raise DataError(f"{location}: {error}")
            check_row(location, row, env_cls.data_keys(args.prompt_key, args.answer_key))
            env_cls.check_row(location, row)
        except (DataError, ValueError) as exc:
            hint = "" if reads_data_keys(env_cls) else f" (--env {args.env} reads fields of its own); {USER_ROWS_HINT}"
            bad(f"--{data_flag}: {exc}{hint}")
        return


def add_data_flags(p):
    """The training data's flags (rl/config.py composes every room's)."""
    g = p.add_argument_group("data")
    g.add_argument("--data_path", default=None,
                   help="training rows: .jsonl, .json, .csv, .tsv, .parquet, .arrow, a save_to_disk folder or an HF "
                        "dataset folder, or a comma list of these to mix (required for --env math; arith generates "
                        "its own)")
    g.add_argument("--data_split", default="train",
                   help="split of a --data_path folder that has several (DatasetDict, HF dataset folder); a file is "
                        "read whole")
    g.add_argument("--prompt_key", default=None,
                   help="field of a --data_path row holding the prompt; default: the env's (math: problem). arith, "
                        "arith_multi and mixed read `prompt` and refuse another; code tells MBPP, HumanEval and "
                        "LiveCodeBench rows apart by their own fields")
    g.add_argument("--answer_key", default=None,
                   help="field of a --data_path row holding the reference answer; default: the env's (math: answer; "
                        "arith: answer, and no other)")
    g.add_argument("--num_train_samples", type=int, default=20000, help="rows drawn for arith's train split")
    g.add_argument("--skip_bad_rows", action="store_true",
                   help="skip malformed data rows (reporting how many) instead of stopping at the first")
