"""benchmarks/archive_pack.py: an archive folder committed as FOLDER.tar.gz reads back as the same files, ignores
itself once unpacked, follows its pack when the pack changes, and repacks to the same bytes."""
import os
import subprocess

from benchmarks.archive_pack import MARKER, pack, unpacked


def _folder(root):
    runs = root / "sweep"
    (runs / "abc" / "train").mkdir(parents=True)
    (runs / "abc" / "run.json").write_text('{"method": "grpo", "seed": 1}')
    (runs / "abc" / "train" / "metrics.jsonl").write_text('{"step": 1}\n')
    (runs / "sweep.sweep.json").write_text('{"deciding_metric": "eval:pass@1"}')
    return runs


def _files(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file() and p.name != MARKER}


def test_a_packed_folder_unpacks_to_the_same_files_on_first_read(tmp_path):
    runs = _folder(tmp_path)
    before = _files(runs)
    assert pack(str(runs)) == str(runs) + ".tar.gz"
    os.rename(runs, tmp_path / "elsewhere")  # a fresh clone: the pack alone
    inside = str(runs / "abc" / "train" / "metrics.jsonl")
    assert unpacked(inside) == inside
    assert _files(runs) == before


def test_a_folder_already_unpacked_from_its_pack_is_read_as_it_is(tmp_path):
    runs = _folder(tmp_path)
    pack(str(runs))
    os.rename(runs / "abc", runs / "renamed")  # e.g. a test's own edit, or a run archived before the next pack
    unpacked(str(runs))
    assert (runs / "renamed" / "run.json").exists() and not (runs / "abc").exists()


def test_a_folder_emptied_by_git_rm_is_unpacked_again(tmp_path):
    runs = _folder(tmp_path)
    before = _files(runs)
    pack(str(runs))
    for path in [p for p in runs.rglob("*") if p.is_file() and p.name != MARKER]:
        path.unlink()
    unpacked(str(runs))
    assert _files(runs) == before


def test_an_unchanged_folder_repacks_to_the_same_bytes(tmp_path):
    runs = _folder(tmp_path)
    first = open(pack(str(runs)), "rb").read()
    os.utime(runs / "abc" / "run.json", (1, 1))  # a new mtime or a second packing changes nothing
    assert open(pack(str(runs)), "rb").read() == first


def test_a_changed_pack_replaces_the_folder_unpacked_from_the_older_one(tmp_path):
    runs = _folder(tmp_path)
    old = open(pack(str(runs)), "rb").read()
    (runs / "def").mkdir()
    (runs / "def" / "run.json").write_text('{"method": "grpo", "seed": 2}')
    new = open(pack(str(runs)), "rb").read()
    with open(str(runs) + ".tar.gz", "wb") as f:  # a checkout of the commit before the second run
        f.write(old)
    unpacked(str(runs))
    assert not (runs / "def").exists() and (runs / "abc" / "run.json").exists()
    with open(str(runs) + ".tar.gz", "wb") as f:  # and back
        f.write(new)
    unpacked(str(runs))
    assert (runs / "def" / "run.json").exists()


def test_a_folder_not_unpacked_from_its_pack_is_left_as_it_is(tmp_path, capsys):
    runs = _folder(tmp_path)
    pack(str(runs))
    os.remove(runs / MARKER)
    (runs / "abc" / "run.json").write_text("mine")
    unpacked(str(runs))
    assert (runs / "abc" / "run.json").read_text() == "mine"
    assert "was not unpacked from" in capsys.readouterr().err


def test_git_sees_the_pack_and_not_the_unpacked_folder(tmp_path):
    runs = _folder(tmp_path)
    pack(str(runs))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stdout.split()
    assert status == ["??", "sweep.tar.gz"]
