"""Which checkpoint `--resume` picks: `latest` naming a missing or unfinished step falls back to the newest complete
one with a warning; step folders with no complete checkpoint refuse to start from scratch over them."""
import logging
import os

import pytest

from rl.run.checkpoint import latest_checkpoint, resolve_resume
from rl.run.manifest import CheckpointError, checkpoint_files, file_entries, write_manifest


def make_step(root, step, complete=True, payload=b"weights"):
    """A step folder with one data file; `complete` ones get the manifest a finished save writes."""
    folder = os.path.join(root, f"step_{step}")
    os.makedirs(folder)
    with open(os.path.join(folder, "zero_pp_rank_0_mp_rank_00_optim_states.pt"), "wb") as f:
        f.write(payload * 100)
    if complete:
        write_manifest(folder, file_entries(folder, checkpoint_files(folder)), step, 1, {"algo": "grpo"})
    return folder


def point_latest_at(root, tag):
    with open(os.path.join(root, "latest"), "w") as f:
        f.write(tag + "\n")


@pytest.fixture
def out(tmp_path):
    root = tmp_path / "checkpoints"
    root.mkdir()
    return str(tmp_path)


def test_latest_naming_a_missing_step_falls_back_to_the_newest_complete_one_with_a_warning(out, caplog):
    root = os.path.join(out, "checkpoints")
    make_step(root, 1)
    make_step(root, 2)
    point_latest_at(root, "step_3")
    with caplog.at_level(logging.WARNING):
        point = resolve_resume("auto", out)
    assert (point.tag, point.step) == ("step_2", 2)
    assert "names step_3, which does not exist" in caplog.text and "step_2" in caplog.text


def test_latest_naming_an_unfinished_save_falls_back_to_the_newest_complete_one(out, caplog):
    root = os.path.join(out, "checkpoints")
    make_step(root, 1)
    make_step(root, 2, complete=False)  # killed before its manifest was written
    point_latest_at(root, "step_2")
    with caplog.at_level(logging.WARNING):
        point = resolve_resume("auto", out)
    assert point.tag == "step_1"
    assert "save never finished" in caplog.text
    assert latest_checkpoint(root) is None  # `latest` names no complete checkpoint


def test_checkpoints_with_none_complete_refuse_instead_of_starting_from_scratch(out):
    root = os.path.join(out, "checkpoints")
    make_step(root, 1, complete=False)
    point_latest_at(root, "step_1")
    with pytest.raises(CheckpointError, match="Refusing to start from scratch") as err:
        resolve_resume("auto", out)
    assert root in str(err.value) and "step_1" in str(err.value)


def test_an_output_dir_without_checkpoints_starts_fresh(out, tmp_path):
    assert resolve_resume("auto", out) is None
    assert resolve_resume("auto", str(tmp_path / "never_used")) is None
    make_step(os.path.join(out, "checkpoints"), 1)
    assert resolve_resume("none", out) is None


def test_a_complete_checkpoint_named_by_latest_is_used_and_verifies(out):
    root = os.path.join(out, "checkpoints")
    make_step(root, 1)
    make_step(root, 2)
    point_latest_at(root, "step_1")  # e.g. a user rolled back on purpose: `latest` decides
    point = resolve_resume("auto", out)
    assert point.tag == "step_1" and point.flags == {"algo": "grpo"}
    point.verify()


def test_a_file_changed_after_the_save_is_refused_naming_it(out):
    folder = make_step(os.path.join(out, "checkpoints"), 1)
    path = os.path.join(folder, "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"XXXX")  # same size, other bytes
    with pytest.raises(CheckpointError, match="is corrupt") as err:
        resolve_resume("auto", out).verify()
    assert path in str(err.value)


def test_a_truncated_or_missing_file_is_refused_naming_it(out):
    folder = make_step(os.path.join(out, "checkpoints"), 1)
    path = os.path.join(folder, "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    os.truncate(path, 10)
    with pytest.raises(CheckpointError, match="truncated") as err:
        resolve_resume("auto", out).verify()
    assert path in str(err.value) and "10 bytes" in str(err.value)
    os.remove(path)
    with pytest.raises(CheckpointError, match="is missing") as err:
        resolve_resume("auto", out).verify()
    assert path in str(err.value)


def test_an_explicit_step_folder_without_a_manifest_loads_unchecked_with_a_warning(out, caplog):
    folder = make_step(os.path.join(out, "checkpoints"), 4, complete=False)
    point = resolve_resume(folder, out)
    assert point.tag == "step_4" and point.manifest is None
    with caplog.at_level(logging.WARNING):
        point.verify()
    assert "loading it unchecked" in caplog.text


def test_resume_from_a_folder_without_checkpoints_names_it(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint there"):
        resolve_resume(str(tmp_path), str(tmp_path))
