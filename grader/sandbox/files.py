"""Read and remove what a sandboxed child left in its working folder, without trusting any of it.

The child controls every name in its folder: it can leave a FIFO where the grader expects an
outputs file (a plain ``open`` blocks forever), a symlink to /etc/shadow or to another student's
folder, a sparse file that claims terabytes, folders it made unreadable or read-only, or a chain of
folders thousands deep (``os.walk`` and ``shutil.rmtree`` recurse per level and die with
RecursionError; ``os.walk`` on 3.12 instead stops silently where the path outgrows PATH_MAX).

So everything here works relative to open folder descriptors (a path is never rebuilt, so its
length does not matter and a rename cannot redirect us), never follows a symlink, refuses
anything but regular files, walks with an explicit stack and keeps a bounded number of
descriptors open. Linux only; standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

__all__ = ["UnsafeFile", "read_regular", "remove_tree", "tree_usage"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading with no writer returns at once instead of waiting for
# one (a child that left a FIFO would stall the grader forever). We never read from one anyway:
# fstat below refuses it. O_NOCTTY: a terminal device must not become our controlling terminal.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_OPEN_FOLDERS = 32  # folder descriptors a walk keeps open, however deep the tree
_CHUNK = 1 << 20


class UnsafeFile(Exception):
    """A file the grader refuses to read; the message says which file and why, in one sentence."""


def _kind(mode: int) -> str:
    for test, words in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "of an unknown type"


def read_regular(folder: str | Path, name: str, max_bytes: int) -> bytearray:
    """The content of regular file ``name`` in ``folder``: at most ``max_bytes``, never blocking.

    Raises FileNotFoundError when there is no such file (so callers can say nothing was saved)
    and UnsafeFile for anything else that is not a regular file of at most ``max_bytes`` bytes.
    """
    if not name or "/" in name or "\0" in name or name in (".", ".."):
        raise UnsafeFile(f"{name!r} is not a plain file name")
    try:
        dir_fd = os.open(folder, _DIR_FLAGS)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeFile(f"{os.fspath(folder)} is not a real folder") from None
        raise
    try:
        # Look before opening, so a device node is refused without its driver's open running;
        # the fstat after opening is what counts (the name may be swapped in between).
        try:
            before = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise
        except OSError as e:
            raise UnsafeFile(f"{name} could not be examined ({e.strerror})") from None
        if not stat.S_ISREG(before.st_mode):
            raise UnsafeFile(f"{name} is {_kind(before.st_mode)}, not a regular file")
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise
        except OSError as e:  # ELOOP: swapped for a symlink; ENXIO: a socket; EACCES ...
            raise UnsafeFile(f"{name} could not be opened ({e.strerror})") from None
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile(f"{name} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > max_bytes:  # refused before reading: a sparse file may claim anything
            raise UnsafeFile(f"{name} is {st.st_size} bytes, over the limit of {max_bytes}")
        return _read_within(fd, name, st.st_size, max_bytes)
    except OSError as e:
        raise UnsafeFile(f"{name} could not be read ({e.strerror})") from None
    finally:
        os.close(fd)


def _read_within(fd: int, name: str, size: int, max_bytes: int) -> bytearray:
    """The file's bytes, read straight into one buffer of its ``size`` (a tensor file can be
    gigabytes: no chunks joined afterwards), then what it grew by since, within ``max_bytes``."""
    data = bytearray(size)
    with memoryview(data) as view:
        total = 0
        while total < size:
            count = os.readv(fd, [view[total:]])
            if not count:
                break
            total += count
    del data[total:]  # the file shrank meanwhile
    while len(data) <= max_bytes:  # read one byte past the limit: the file may still grow
        chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - len(data)))
        if not chunk:
            break
        data += chunk
    if len(data) > max_bytes:
        raise UnsafeFile(f"{name} grew past the limit of {max_bytes} bytes while being read")
    return data


class _Folder:
    __slots__ = ("fd", "ident", "name", "todo")

    def __init__(self, fd: int, ident: tuple[int, int] | None, name: str | None, todo: list[str]):
        self.fd, self.ident, self.name, self.todo = fd, ident, name, todo


def _open_folder(dir_fd: int, name: str, fix_modes: bool, dev: int | None) -> tuple[int, os.stat_result]:
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        if not fix_modes:
            raise
        # Mode 000 (not root): chmod through an O_PATH descriptor, which needs no permission and
        # does not follow a symlink; /proc/self/fd then names exactly that inode.
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            if stat.S_ISDIR(os.fstat(path_fd).st_mode):
                os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
        finally:
            os.close(path_fd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if dev is not None and st.st_dev != dev:  # a mount point: not ours to empty
            raise OSError(errno.EXDEV, "another file system", name)
        if fix_modes and st.st_mode & 0o700 != 0o700:  # read-only folder: its entries are stuck
            try:
                os.fchmod(fd, 0o700)
            except OSError:
                pass  # not ours: removal may still work, or will report False
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _walk(parent_fd: int, name: str, fix_modes: bool):
    """Depth-first over folder ``name`` of ``parent_fd``, with an explicit stack.

    Yields ("entry", folder_fd, DirEntry, is_dir) for each entry as its folder is listed, and
    ("done", parent_fd, name, True) once a folder's entries have all been yielded, or when it
    could not be entered (unreadable, another file system). Only the deepest _OPEN_FOLDERS
    folders keep a descriptor; going back up to a closed one reopens it through ".." and
    checks it is the same inode, so a folder moved meanwhile stops the walk (OSError) instead
    of leading it somewhere else. Raises OSError when it cannot go on safely.
    """
    stack = [_Folder(parent_fd, None, None, [name])]  # the caller's folder: never closed here
    dev = None
    try:
        while True:
            top = stack[-1]
            if top.todo:
                child = top.todo.pop()
                try:
                    fd, st = _open_folder(top.fd, child, fix_modes, dev)
                except OSError:
                    yield "done", top.fd, child, True
                    continue
                dev = st.st_dev if dev is None else dev
                folder = _Folder(fd, (st.st_dev, st.st_ino), child, [])
                stack.append(folder)
                if len(stack) > _OPEN_FOLDERS + 1:  # open ones are a suffix of the stack
                    oldest = stack[-_OPEN_FOLDERS - 1]
                    if oldest.fd >= 0:
                        os.close(oldest.fd)
                        oldest.fd = -1
                with os.scandir(fd) as entries:
                    for entry in entries:
                        is_dir = entry.is_dir(follow_symlinks=False)
                        yield "entry", fd, entry, is_dir
                        if is_dir:
                            folder.todo.append(entry.name)
                continue
            if len(stack) == 1:
                return
            up = stack[-2]
            if up.fd < 0:
                fd = os.open("..", _DIR_FLAGS, dir_fd=top.fd)
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != up.ident:
                    os.close(fd)
                    raise OSError(errno.ESTALE, "a folder was moved during the walk", up.name)
                up.fd = fd
            os.close(top.fd)
            stack.pop()
            yield "done", up.fd, top.name, True
    finally:
        for folder in stack[1:]:
            if folder.fd >= 0:
                os.close(folder.fd)


def _split(path: str | Path) -> tuple[str, str]:
    head, name = os.path.split(os.path.abspath(os.fspath(path)))
    if not name:
        raise ValueError(f"refusing to work on {os.fspath(path)!r}")
    return head, name


def remove_tree(path: str | Path, time_limit: float = 30.0) -> bool:
    """Delete ``path`` and everything below it; True when nothing is left.

    False when it stopped at ``time_limit`` seconds or something stayed behind (an entry it
    could not delete, a mount point, a folder moved while it worked); errors on the tree's
    content never raise. A missing ``path`` counts as removed; a ``path`` that is not a folder
    (file, symlink, FIFO ...) is unlinked itself, never followed. The path's parent folder is the
    caller's and is trusted. ValueError for "/".
    """
    deadline = time.monotonic() + time_limit
    head, name = _split(path)
    try:
        parent = os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    clean = True
    walk = _walk(parent, name, fix_modes=True)
    try:
        try:
            if not stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=parent)
                return True
        except FileNotFoundError:
            return True
        for kind, dir_fd, entry, is_dir in walk:
            if time.monotonic() > deadline:
                return False
            try:
                if kind == "done":
                    os.rmdir(entry, dir_fd=dir_fd)
                elif not is_dir:
                    os.unlink(entry.name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            except OSError:
                clean = False
        return clean
    except OSError:
        return False
    finally:
        walk.close()
        os.close(parent)


def tree_usage(path: str | Path, max_entries: int) -> tuple[int, int, bool]:
    """(bytes on disk, entries, stopped_early) of everything below folder ``path``.

    Bytes are st_blocks * 512 from lstat (a sparse file counts what it really uses); the folder
    itself is not counted. Counting stops once entries exceed ``max_entries`` or when the walk
    cannot go on safely, and then stopped_early is True. Folders it cannot read count as one
    entry each and are skipped (it never changes modes); other file systems are not entered.
    Missing or non-folder ``path``: (0, 0, False).
    """
    head, name = _split(path)
    used = entries = 0
    try:
        parent = os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return used, entries, False
    walk = _walk(parent, name, fix_modes=False)
    try:
        for kind, _fd, entry, _is_dir in walk:
            if kind != "entry":
                continue
            entries += 1
            if entries > max_entries:
                return used, entries, True
            try:
                used += entry.stat(follow_symlinks=False).st_blocks * 512
            except OSError:
                pass
        return used, entries, False
    except OSError:
        return used, entries, True
    finally:
        walk.close()
        os.close(parent)
