"""Host directories for runs without bubblewrap: created private, removed without recursion. A program can build
a tree deeper than Python's recursion limit (shutil.rmtree in 3.11 recurses and raises on it) and longer than
PATH_MAX, so removal walks it with one directory descriptor at a time and names relative to it."""
import os

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def make_private_dir(root: str, owner) -> str:
    import tempfile  # here, not at the top: the runner imports this module on every run, bubblewrap's too
    os.makedirs(root, mode=0o711, exist_ok=True)
    path = tempfile.mkdtemp(prefix="run-", dir=root)  # 0700
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def remove_tree(top: str):
    """Delete top and everything below it; never follows a symlink. Only for trees no process is changing."""
    fd, names = os.open(top, _DIR_FLAGS), []  # names: the path from top to fd, one component each
    while True:
        subdir = None
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    subdir = entry.name
                    break
                os.unlink(entry.name, dir_fd=fd)
        if subdir is not None:  # descend
            os.chmod(subdir, 0o700, dir_fd=fd)  # a program may leave directories it made unreadable
            child = os.open(subdir, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            names.append(subdir)
            continue
        if not names:
            os.close(fd)
            os.rmdir(top)
            return
        parent = os.open("..", _DIR_FLAGS, dir_fd=fd)  # climb back and remove the now empty directory
        os.close(fd)
        os.rmdir(names.pop(), dir_fd=parent)
        fd = parent
