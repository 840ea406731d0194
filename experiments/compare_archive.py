"""A sweep's cache, slimmed to what its report reads, so it can be committed and reproduce the report anywhere.

compare.py's cache holds each run's model and checkpoints (about 2 GB per SmolLM2 run). The report reads only
`run.json`, `train/metrics.jsonl` and the metrics of `eval/results.json`. `archive_run` copies those (the eval file
without its per-problem responses) into ARCHIVE/<key>/ in the cache's own layout, so that
`compare.py ... --cache_dir ARCHIVE` reproduces the committed comparison with nothing to run, and a sweep spread
over several sittings can be committed in parts. The evidence behind the numbers is kept beside them, compressed:
the eval's per-problem responses (`eval/problems.json.gz`) and the training's sampled completions
(`train/completions.jsonl.gz`), so that what a metric counted can be read back (experiments/response_audit.py).
Git keeps each archive folder as one file, ARCHIVE.tar.gz beside it (benchmarks/archive_pack.py): archive_run and
archive_sweep_file repack it, and compare.py unpacks it before reading (the unpacked folder is git-ignored).
"""
import gzip
import json
import os
import shutil

from benchmarks.archive_pack import pack

SLIM_FILES = ("run.json", os.path.join("train", "metrics.jsonl"))
PROBLEMS_GZ = "problems.json.gz"  # eval.py's per-problem records (responses included), beside the slim results.json


def _write_json_atomically(path: str, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1, default=str)
    os.replace(tmp, path)


def _gzip_atomically(data: bytes, path: str):
    tmp = path + ".tmp"
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:  # mtime 0: the same run archives to the same bytes
        f.write(data)
    os.replace(tmp, path)


def archive_run(run_dir: str, archive_dir: str) -> str:
    """Copy one finished run's report inputs into archive_dir/<basename(run_dir)>/; returns that folder.

    run.json is written last, as in the cache, so an interrupted archive is never taken for a finished run.
    """
    target = os.path.join(archive_dir, os.path.basename(run_dir.rstrip(os.sep)))
    os.makedirs(os.path.join(target, "train"), exist_ok=True)
    shutil.copyfile(os.path.join(run_dir, SLIM_FILES[1]), os.path.join(target, SLIM_FILES[1]))
    results = os.path.join(run_dir, "eval", "results.json")
    if os.path.exists(results):
        with open(results) as f:
            evaluation = json.load(f)
        os.makedirs(os.path.join(target, "eval"), exist_ok=True)
        _write_json_atomically(os.path.join(target, "eval", "results.json"),
                               {k: v for k, v in evaluation.items() if k != "problems"})
        if "problems" in evaluation:
            _gzip_atomically(json.dumps(evaluation["problems"]).encode(), os.path.join(target, "eval", PROBLEMS_GZ))
    completions = os.path.join(run_dir, "train", "completions.jsonl")
    if os.path.exists(completions):
        with open(completions, "rb") as f:
            _gzip_atomically(f.read(), os.path.join(target, "train", "completions.jsonl.gz"))
    with open(os.path.join(run_dir, "run.json")) as f:
        _write_json_atomically(os.path.join(target, "run.json"), json.load(f))
    pack(archive_dir)
    return target


def restore_sweep_file(sweep_json: str, archive_dir: str):
    """A sweep continued from a fresh clone (an empty cache) takes its pre-registration from the archive, so that
    its registration time survives and a switched metric is refused there too. Before, the empty cache registered
    anew and the copy back overwrote the archive's file with that invocation's time and metric."""
    archived = os.path.join(archive_dir, os.path.basename(sweep_json))
    if os.path.exists(archived) and not os.path.exists(sweep_json):
        os.makedirs(os.path.dirname(sweep_json), exist_ok=True)
        shutil.copyfile(archived, sweep_json)


def archive_sweep_file(sweep_json: str, archive_dir: str):
    """The pre-registration (NAME.sweep.json) travels with the runs, so the archive refuses a switched metric too."""
    os.makedirs(archive_dir, exist_ok=True)
    shutil.copyfile(sweep_json, os.path.join(archive_dir, os.path.basename(sweep_json)))
    pack(archive_dir)


def complete_seeds(seeds, methods, is_done) -> list:
    """The seeds whose runs are finished under every method: a partial report holds complete pairs only."""
    return [seed for seed in seeds if all(is_done(label, seed) for label in methods)]


def command_id(train_argv, eval_argv) -> str:
    return json.dumps({"train": list(train_argv), "eval": None if eval_argv is None else list(eval_argv)})


def runs_by_command(cache_dir: str) -> dict:
    """{command_id: run folder} of every finished run under cache_dir, from the commands their run.json records.

    The cache key is the resolved config, so a later credo with one more flag (any default) gives every run a new
    key; an archived run is then still found by the literal command it ran (its record names its commit).
    """
    found = {}
    if not os.path.isdir(cache_dir):
        return found
    for name in sorted(os.listdir(cache_dir)):
        record = os.path.join(cache_dir, name, "run.json")
        if os.path.exists(record):
            with open(record) as f:
                meta = json.load(f)
            found.setdefault(command_id(meta["train_argv"], meta.get("eval_argv")), os.path.join(cache_dir, name))
    return found
