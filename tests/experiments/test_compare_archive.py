"""experiments/compare_archive.py: the slim copy a sweep commits keeps the report's inputs and, compressed, the
responses behind them."""
import gzip
import json
import subprocess

import pytest

from benchmarks.archive_pack import SUFFIX
from experiments.compare_archive import PROBLEMS_GZ, archive_run
from tests.helpers import REPO_ROOT


def test_the_archive_keeps_slim_results_and_the_responses_behind_them(tmp_path):
    run = tmp_path / "cache" / "abc"
    (run / "train" / "final").mkdir(parents=True)
    (run / "eval").mkdir()
    (run / "train" / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    (run / "train" / "completions.jsonl").write_text('{"step": 1, "completion": "7 = \\\\boxed{number}"}\n')
    (run / "train" / "final" / "model.safetensors").write_bytes(b"weights")
    problems = [{"id": 0, "responses": [["7 = \\boxed{number}"]], "correct_by_turn": [[0]]}]
    (run / "eval" / "results.json").write_text(json.dumps({"metrics": {"pass@1": 0.0}, "config": {}, "problems": problems}))
    (run / "run.json").write_text(json.dumps({"method": "equal", "seed": 1}))

    target = tmp_path / "archive" / "abc"
    assert archive_run(str(run), str(tmp_path / "archive")) == str(target)
    assert json.loads((target / "eval" / "results.json").read_text()) == {"metrics": {"pass@1": 0.0}, "config": {}}
    with gzip.open(target / "eval" / PROBLEMS_GZ) as f:
        assert json.load(f) == problems
    with gzip.open(target / "train" / "completions.jsonl.gz", "rt") as f:
        assert json.loads(f.readline())["completion"] == "7 = \\boxed{number}"
    assert not (target / "train" / "final").exists()
    first = (target / "eval" / PROBLEMS_GZ).read_bytes()
    archive_run(str(run), str(tmp_path / "archive"))
    assert (target / "eval" / PROBLEMS_GZ).read_bytes() == first  # the same run archives to the same bytes


def test_the_committed_archives_are_packed_one_file_a_sweep():
    # issue #63: the archived runs were 446 of the tree's results files; git keeps one NAME.tar.gz per sweep, and a
    # folder beside a pack is its git-ignored unpacking, never tracked
    proc = subprocess.run(["git", "ls-files", "experiments/results", "benchmarks/results"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout")
    tracked = proc.stdout.split()
    packs = [path[:-len(SUFFIX)] + "/" for path in tracked if path.endswith(SUFFIX)]
    assert any(path.startswith("experiments/results/archive/") for path in packs)
    assert [path for path in tracked if path.startswith(tuple(packs))] == []
    assert len(tracked) <= 200, f"{len(tracked)} tracked results files: pack archived runs (benchmarks/archive_pack.py)"
