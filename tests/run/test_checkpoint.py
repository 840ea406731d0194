"""Checkpoints of a real DeepSpeed ZeRO-3 engine (tiny Llama, one process): the manifest, corrupt and truncated
files, non-finite weights, and a save that the kernel stops half-way."""
import hashlib
import json
import os
import resource
import shutil
import signal

import pytest
import torch

from rl.run.checkpoint import (latest_checkpoint, load_checkpoint, nonfinite_counts, resolve_resume, save_checkpoint)
from rl.run.manifest import CheckpointError
from tests.helpers import one_rank_process_group

pytestmark = pytest.mark.slow
MODEL_FILE = "zero_pp_rank_0_mp_rank_00_model_states.pt"


def train_one_step(engine):
    ids = torch.randint(4, 90, (2, 12))
    for _ in range(engine.gradient_accumulation_steps()):
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        engine.step()


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    with one_rank_process_group():
        from rl.config import parse_args
        from rl.engine.actor import EngineSettings, build_actor
        args = parse_args(["--model_name_or_path", tiny_model_dir, "--env", "tests.fixture_envs:DigitFractionEnv",
                           "--output_dir", "unused", "--actor_zero_stage", "3"])
        actor = build_actor(EngineSettings.from_args(args), 1, 10)
        train_one_step(actor)  # so that the Adam moments exist and are saved
        yield actor
        del actor


def optim_file(folder) -> str:
    """The rank-0 optimizer file's name: DeepSpeed prefixes it with bf16_ when --dtype auto picks bf16 (a CPU with
    AMX or AVX-512 BF16), zero_pp_rank_0_mp_rank_00_optim_states.pt otherwise."""
    names = [n for n in os.listdir(folder) if n.endswith("zero_pp_rank_0_mp_rank_00_optim_states.pt")]
    assert len(names) == 1, sorted(os.listdir(folder))
    return names[0]


def saved(engine, out, step=1):
    return save_checkpoint(engine, str(out), step, {"step": step}, flags={"algo": "grpo"})


def test_a_save_lists_every_file_with_its_sha256_in_the_manifest(engine, tmp_path):
    folder = saved(engine, tmp_path)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    on_disk = sorted(n for n in os.listdir(folder) if n != "manifest.json")
    assert sorted(manifest["files"]) == on_disk and optim_file(folder) in on_disk
    for name, entry in manifest["files"].items():
        with open(os.path.join(folder, name), "rb") as f:
            data = f.read()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert manifest["step"] == 1 and manifest["flags"] == {"algo": "grpo"}
    assert latest_checkpoint(os.path.join(str(tmp_path), "checkpoints")) == "step_1"


def test_4_kib_overwritten_in_the_optimizer_file_is_refused_naming_the_file(engine, tmp_path):
    folder = saved(engine, tmp_path)
    path = os.path.join(folder, optim_file(folder))
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        f.write(os.urandom(4096))
    with pytest.raises(CheckpointError, match="is corrupt") as err:
        resolve_resume("auto", str(tmp_path)).verify()
    assert path in str(err.value)


def test_a_truncated_model_file_is_refused_naming_the_file(engine, tmp_path):
    folder = saved(engine, tmp_path)
    path = os.path.join(folder, MODEL_FILE)
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(CheckpointError, match="truncated") as err:
        resolve_resume("auto", str(tmp_path)).verify()
    assert path in str(err.value)


def test_a_checkpoint_of_non_finite_master_weights_is_refused_at_load(engine, tmp_path):
    good = saved(engine, tmp_path, step=1)
    master = engine.optimizer.fp32_partitioned_groups_flat[0].data
    kept = master[:3].clone()
    master[:3] = float("nan")  # what a run that diverged unnoticed would save
    try:
        saved(engine, tmp_path, step=2)
    finally:
        master[:3] = kept
    point = resolve_resume("auto", str(tmp_path))
    point.verify()  # the files are exactly what was saved: only the values are bad
    with pytest.raises(CheckpointError, match="3 non-finite values in the fp32 master weights") as err:
        load_checkpoint(engine, point.root, point.tag)
    assert point.path in str(err.value) and good in str(err.value)  # and it names the earlier one to use
    load_checkpoint(engine, point.root, "step_1")
    assert nonfinite_counts(engine) == {}


def test_a_save_stopped_by_the_kernel_names_the_file_and_errno_and_leaves_no_partial_folder(engine, tmp_path):
    name = optim_file(saved(engine, tmp_path, step=1))
    root = os.path.join(str(tmp_path), "checkpoints")
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so the write fails with EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, limit[1]))  # the optimizer file is larger than this
    try:
        with pytest.raises(CheckpointError) as err:
            saved(engine, tmp_path, step=2)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    message = str(err.value)
    assert os.path.join(root, ".tmp-step_2", name) in message and "[Errno 27 EFBIG] File too large" in message
    assert "step_1 is intact" in message
    assert sorted(n for n in os.listdir(root) if "step_" in n) == ["step_1"]  # no .tmp-step_2 left
    assert latest_checkpoint(root) == "step_1"


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 256 KiB tmpfs: a real full disk. Needs root (CI runs as root here); skipped elsewhere."""
    mount = tmp_path / "small_disk"
    mount.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size=256k tmpfs {mount} 2>/dev/null") != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield str(mount)
    os.system(f"umount {mount}")


def test_a_full_disk_names_the_file_and_enospc_and_removes_the_partial_folder(engine, tiny_tmpfs):
    with pytest.raises(CheckpointError) as err:
        saved(engine, tiny_tmpfs, step=1)
    assert "[Errno 28 ENOSPC] No space left on device" in str(err.value)
    assert os.path.join(tiny_tmpfs, "checkpoints", ".tmp-step_1") in str(err.value)
    assert [n for n in os.listdir(os.path.join(tiny_tmpfs, "checkpoints")) if "step_" in n] == []
    shutil.rmtree(os.path.join(tiny_tmpfs, "checkpoints"))


def test_the_save_limit_keeps_the_newest_checkpoints_of_the_current_timeline(engine, tmp_path):
    for step in (1, 2, 3, 4):
        saved(engine, tmp_path, step=step)
    root = os.path.join(str(tmp_path), "checkpoints")
    save_checkpoint(engine, str(tmp_path), 2, {"step": 2}, save_total_limit=2)  # a run restarted from scratch
    assert sorted(n for n in os.listdir(root) if n.startswith("step_")) == ["step_1", "step_2"]
    assert latest_checkpoint(root) == "step_2"
