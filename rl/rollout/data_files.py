"""Reading data rows from any common format: JSONL, JSON, CSV/TSV, Parquet, Arrow, `save_to_disk` and HF dataset
folders, or a comma list of these to mix (as verl's `data.train_files` does).

Every reader yields `(location, row, error)`: `location` names the file and line (JSONL, JSON lines) or the file and
1-based row, so that a bad row is reported where a user can find it; `error` is the reason a row could not be read
at all (then `row` is None). Columnar formats go through `datasets` (pyarrow underneath); JSONL keeps its own
line-by-line reader because pyarrow reports neither the line of a bad row nor accepts a column whose type changes
between rows (an answer that is 4 in one row and "x^2" in the next).
"""
import csv
import json
import os
import tempfile

SUPPORTED = (".jsonl, .json (an array of objects, or JSON lines), .csv, .tsv, .parquet, .arrow, a save_to_disk "
             "folder, or an HF dataset folder (data files that `datasets.load_dataset(folder)` reads)")
FILE_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
                ".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow"}


class DataError(ValueError):
    """Bad input data, with the file, line (or row) and key in the message."""


def check_data_path(args, bad) -> None:
    """Refuse a --data_path that names no readable data file, where the flags are parsed (`bad` raises)."""
    if args.data_path is not None:
        try:
            data_paths(args.data_path)
        except DataError as exc:
            bad(f"--data_path: {exc}")


def data_paths(spec: str) -> list:
    """The paths of a --data_path value (one path, or a comma list), each checked to exist and be readable."""
    paths = [spec] if os.path.exists(spec) else [p.strip() for p in spec.split(",") if p.strip()]
    if not paths:
        raise DataError("--data_path is empty")
    for path in paths:
        if not os.path.exists(path):
            raise DataError(f"{path} does not exist")
        data_format(path)
    return paths


def data_format(path: str) -> str:
    """jsonl, json, csv, tsv, parquet, arrow, disk (save_to_disk) or folder (HF dataset folder)."""
    if os.path.isdir(path):
        is_disk = any(os.path.exists(os.path.join(path, f)) for f in ("state.json", "dataset_dict.json"))
        return "disk" if is_disk else "folder"
    ext = os.path.splitext(path)[1].lower()
    if ext not in FILE_FORMATS:
        raise DataError(f"{path}: unknown data format {ext or '(no extension)'!r}; supported: {SUPPORTED}")
    return FILE_FORMATS[ext]


def read_records(path: str, split: str = "train"):
    """Yield (location, row, error) for every row of one path. `split` picks the split of a folder that has
    several (a DatasetDict saved to disk, an HF dataset folder); a single file is read whole."""
    fmt = data_format(path)
    if fmt == "jsonl":
        yield from _read_json_lines(path)
    elif fmt == "json":
        yield from (_read_json_array(path) if _first_char(path) == "[" else _read_json_lines(path, json_file=True))
    else:
        for i, row in enumerate(_read_with_datasets(path, fmt, split)):
            yield f"{path}: row {i + 1}", row, None


def _read_json_lines(path: str, json_file: bool = False):
    hint = " (a .json file is read as a JSON array of objects, or as one JSON object per line)" if json_file else ""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            location = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield location, None, f"not valid UTF-8 ({exc.reason} at byte {exc.start})"
                continue
            if not line.strip():
                continue
            try:
                yield location, json.loads(line), None
            except json.JSONDecodeError as exc:
                yield location, None, f"malformed JSON ({exc.msg}){hint}"


def _read_json_array(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg})") from None
    for i, row in enumerate(rows):
        yield f"{path}: row {i + 1}", row, None


def _first_char(path: str) -> str:
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head[:1].decode("ascii", errors="replace")


def _read_with_datasets(path: str, fmt: str, split: str) -> list:
    """Rows of a columnar file or a dataset folder, as plain dicts."""
    import datasets

    bars_were_on = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a 1-row file would print three progress bars per rank
    try:
        if fmt == "disk":
            return _pick_split(path, datasets.load_from_disk(path), split).to_list()
        # a private cache, deleted once the rows are in memory: nothing accumulates in ~/.cache between runs and
        # ranks reading the same file do not queue on the cache's file lock
        with tempfile.TemporaryDirectory(prefix="credo-data-") as cache:
            kwargs = {"cache_dir": cache, "keep_in_memory": True}
            if fmt == "folder":
                return _pick_split(path, datasets.load_dataset(os.path.abspath(path), **kwargs), split).to_list()
            if fmt in ("csv", "tsv"):
                # credo's reading: CSV cells are text (an answer "007" stays "007"; pandas would make it 7)
                kwargs["sep"] = "\t" if fmt == "tsv" else ","
                header = _csv_header(path, kwargs["sep"])
                kwargs["features"] = datasets.Features({column: datasets.Value("string") for column in header})
            builder = "csv" if fmt == "tsv" else fmt
            return datasets.load_dataset(builder, data_files=[os.path.abspath(path)], split="train", **kwargs).to_list()
    except DataError:
        raise
    except Exception as exc:  # pyarrow / pandas / datasets errors: say which file and which format was expected
        raise DataError(f"{path}: cannot be read as {fmt} ({type(exc).__name__}: {str(exc)[:300]})") from None
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()


def _csv_header(path: str, sep: str) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f, delimiter=sep), None)
    if not header:
        raise DataError(f"{path}: empty file (a CSV needs a header line naming the columns)")
    if len(set(header)) != len(header):
        raise DataError(f"{path}:1: the header names a column twice: {header}")
    return header


def _pick_split(path: str, loaded, split: str):
    """A Dataset as is; the `split` of a DatasetDict, or a DataError listing the splits it has."""
    if not hasattr(loaded, "keys"):
        return loaded
    if split not in loaded:
        raise DataError(f"{path}: has no split {split!r}; its splits are {', '.join(loaded.keys())} "
                        f"(choose one with --data_split)")
    return loaded[split]
