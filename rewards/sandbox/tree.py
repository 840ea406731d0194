"""Host directories for runs without bubblewrap: created private, removed without recursion (a program can build
a directory tree deeper than Python's recursion limit; shutil.rmtree in 3.11 recurses and raises on it)."""
import os
import tempfile


def make_private_dir(root: str, owner) -> str:
    os.makedirs(root, mode=0o711, exist_ok=True)
    path = tempfile.mkdtemp(prefix="run-", dir=root)  # 0700
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def remove_tree(top: str):
    """Delete top and everything below it, depth-first with an explicit stack; never follows symlinks."""
    stack = [top]
    while stack:
        path = stack[-1]
        try:
            os.chmod(path, 0o700)  # a program may leave directories it made unreadable
            entries = list(os.scandir(path))
        except FileNotFoundError:
            stack.pop()
            continue
        subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)
        if subdirs:
            stack.extend(subdirs)
        else:
            os.rmdir(path)
            stack.pop()
