"""A folder of archived run records committed as one file, FOLDER.tar.gz beside it, and unpacked when read.

A sweep archives each finished run's slim record as a folder of about five files (experiments/compare_archive.py);
those folders were most of the tracked tree. Git keeps FOLDER.tar.gz instead. A reader calls `unpacked(path)`
first: the packed folder the path lies in (or is) is extracted when it is missing or its pack has changed since
(a pull, a checkout), and is then read as plain files, so every reader and every path a report records stay as
they were. The unpacked folder ignores itself (its own .gitignore, whose first line holds the pack's sha256), so
only the pack is committed; a folder without that file was not written here and is never overwritten. A writer calls `pack(FOLDER)` after each change; the pack's bytes depend only on the
files (sorted names, mtime 0, no owner), so an unchanged folder repacks to the same bytes and git sees no change.

    python -m benchmarks.archive_pack pack FOLDER [FOLDER...]     # after writing into an archive folder by hand
    python -m benchmarks.archive_pack unpack PATH [PATH...]       # what every reader does first
"""
import argparse
import gzip
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile

SUFFIX = ".tar.gz"
MARKER = ".gitignore"  # in an unpacked folder: ignores everything there, itself included; never packed


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _mark(folder: str, digest: str):
    with open(os.path.join(folder, MARKER), "w") as f:
        f.write(f"# unpacked from ../{os.path.basename(folder)}{SUFFIX}, sha256 {digest} (git keeps that file, "
                "not this folder: benchmarks/archive_pack.py)\n*\n")


def _marked_digest(folder: str):
    """The sha256 of the pack the folder was last unpacked from or packed into; None for a folder never marked."""
    try:
        with open(os.path.join(folder, MARKER)) as f:
            words = f.readline().split()
    except FileNotFoundError:
        return None
    return words[words.index("sha256") + 1] if "sha256" in words[:-1] else None


def pack(folder: str) -> str:
    """Write FOLDER.tar.gz from FOLDER's files (the marker left out); returns the pack's path."""
    folder = os.path.abspath(folder).rstrip(os.sep)
    names = sorted(os.path.relpath(os.path.join(root, name), folder)
                   for root, _, files in os.walk(folder) for name in files)
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in names:
                if name == MARKER or name.endswith(".tmp"):  # .tmp: a file still being written atomically
                    continue
                with open(os.path.join(folder, name), "rb") as f:
                    data = f.read()
                # TarInfo's defaults are mtime 0, uid/gid 0, no owner names, mode 0o644: only the bytes count
                info = tarfile.TarInfo(os.path.basename(folder) + "/" + name.replace(os.sep, "/"))
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    data, path = buffer.getvalue(), folder + SUFFIX
    if not os.path.exists(path) or _sha256(path) != hashlib.sha256(data).hexdigest():
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    _mark(folder, hashlib.sha256(data).hexdigest())
    return path


def _extract(path: str, target: str):
    """The pack's files into target (their first path component, the folder's name, dropped); only plain files
    with relative names are accepted, so a pack cannot write outside target."""
    with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")[1:]
            if not member.isfile() or not parts or member.name.startswith("/") or ".." in parts:
                raise ValueError(f"{path}: {member.name!r} is not a plain file inside the packed folder")
            dest = os.path.join(target, *parts)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with tar.extractfile(member) as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)


def _unpack(folder: str):
    path = folder + SUFFIX
    digest = _sha256(path)
    marked = _marked_digest(folder) if os.path.isdir(folder) else None
    if marked == digest and any(files for _, _, files in os.walk(folder) if files != [MARKER]):
        return  # (a folder holding only its marker had its files removed, by git rm say: unpacked again)
    if os.path.isdir(folder) and marked is None:  # not written here (a user's folder, a tarball beside it): kept
        print(f"archive_pack: {folder} was not unpacked from {path}: read as it is (remove it to read the pack)",
              file=sys.stderr, flush=True)
        return
    fresh = tempfile.mkdtemp(prefix=f".{os.path.basename(folder)}.", dir=os.path.dirname(folder))
    _mark(fresh, digest)  # marked first: a half-finished unpack is ignored by git too
    _extract(path, fresh)
    if os.path.isdir(folder):  # unpacked from an older pack: replaced whole, so a run the pack dropped goes too
        stale = fresh + ".stale"
        os.replace(folder, stale)
        os.replace(fresh, folder)
        shutil.rmtree(stale)
    else:
        os.replace(fresh, folder)


def unpacked(path: str) -> str:
    """`path`, after unpacking the packed folder it lies in or is (the nearest one with a FOLDER.tar.gz beside it)
    if that folder is missing or older than its pack. A path outside any packed folder is returned as it is."""
    folder = os.path.abspath(path).rstrip(os.sep)
    while True:
        if os.path.isfile(folder + SUFFIX):
            _unpack(folder)
            return path
        parent = os.path.dirname(folder)
        if parent == folder:
            return path
        folder = parent


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("pack", "unpack"))
    p.add_argument("paths", nargs="+", help="pack: archive folders; unpack: any path inside a packed folder")
    a = p.parse_args(argv)
    for path in a.paths:
        print(pack(path) if a.action == "pack" else unpacked(path))


if __name__ == "__main__":
    main()
