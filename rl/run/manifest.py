"""A checkpoint's files: each written durably (a failed write names the file and errno), then the manifest, every
file with its size and sha256, written last at save and checked before a load.

A step folder with a readable `manifest.json` is complete (its save finished); one without is the debris of a save
that never finished. A file that is missing, shorter or different from what the manifest says is refused with an
error naming it, so a bit flip or a truncated copy never trains silently.
"""
import errno as errno_codes
import hashlib
import json
import os

import torch

from rl.errors import TrainingAborted

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1
_CHUNK = 8 << 20


class CheckpointError(TrainingAborted):
    """A checkpoint cannot be saved or loaded as it is; the message names the file and what is wrong."""


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_files(folder: str) -> list:
    """Every regular file under folder (relative paths, sorted), the manifest itself excluded."""
    out = []
    for parent, _, names in os.walk(folder):
        for name in names:
            rel = os.path.relpath(os.path.join(parent, name), folder)
            if rel != MANIFEST_NAME:
                out.append(rel)
    return sorted(out)


def file_entries(folder: str, names: list) -> dict:
    """{name: {"bytes", "sha256"}} for the given files of folder."""
    entries = {}
    for name in names:
        path = os.path.join(folder, name)
        entries[name] = {"bytes": os.path.getsize(path), "sha256": sha256_of(path)}
    return entries


def write_manifest(folder: str, files: dict, step: int, world_size: int, flags: dict = None):
    """Write folder/manifest.json durably (temp file, fsync, rename, fsync of the folder)."""
    body = {"format": MANIFEST_FORMAT, "step": step, "world_size": world_size, "files": files,
            "flags": flags or {}}
    tmp = os.path.join(folder, MANIFEST_NAME + ".tmp")
    with open(tmp, "w") as f:
        json.dump(body, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(folder, MANIFEST_NAME))
    fsync_dir(folder)


def fsync_dir(folder: str):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(folder: str):
    """The manifest of a step folder, or None when it has none (an unfinished save) or it is unreadable."""
    path = os.path.join(folder, MANIFEST_NAME)
    try:
        with open(path) as f:
            body = json.load(f)
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) and isinstance(body.get("files"), dict) else None


def verify_checkpoint(folder: str, manifest: dict):
    """Raise CheckpointError naming the first file that is missing, truncated or altered."""
    for name, want in sorted(manifest["files"].items()):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise CheckpointError(f"checkpoint file {path} is missing (listed in {folder}/{MANIFEST_NAME})")
        size = os.path.getsize(path)
        if size != want["bytes"]:
            raise CheckpointError(f"checkpoint file {path} is truncated or extended: {size} bytes, "
                                  f"{want['bytes']} when it was saved")
        got = sha256_of(path)
        if got != want["sha256"]:
            raise CheckpointError(f"checkpoint file {path} is corrupt: sha256 {got[:16]}..., "
                                  f"{want['sha256'][:16]}... when it was saved")


# --- durable writes ---

def describe_failure(exc: BaseException, what: str) -> str:
    """`what: [Errno 28 ENOSPC] No space left on device` from the OSError under exc (torch wraps it in a
    RuntimeError such as "basic_ios::clear: iostream error" or "unexpected pos", which names no file)."""
    seen, cause = set(), exc
    while cause is not None and id(cause) not in seen and not isinstance(cause, OSError):
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, OSError) and cause.errno is not None:
        name = errno_codes.errorcode.get(cause.errno, "?")
        where = cause.filename or what
        return f"{where}: [Errno {cause.errno} {name}] {cause.strerror}"
    return f"{what}: {type(exc).__name__}: {exc}"


class FileWriteError(Exception):
    """Writing one checkpoint file failed; the message names the file and the errno."""


def save_durably(state, path: str, zipfile: bool = False):
    """torch.save through a Python file object (so a write error surfaces as an OSError with its errno and path),
    fsynced so that the manifest written afterwards never lists data still in the page cache."""
    try:
        with open(path, "wb") as f:
            torch.save(state, f, _use_new_zipfile_serialization=zipfile)
            f.flush()
            os.fsync(f.fileno())
    except Exception as exc:
        raise FileWriteError(describe_failure(exc, path)) from exc


def route_writes_through_python(engine):
    from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine
    ckpt_engine = getattr(engine, "checkpoint_engine", None)
    if isinstance(ckpt_engine, TorchCheckpointEngine):  # other engines (Nebula, fast writers) keep their own I/O
        def save(state_dict, path):
            save_durably(state_dict, path, ckpt_engine.zipfile_serialization)
        ckpt_engine.save = save
