"""grader/sandbox/files.py against what a hostile child can leave in its working folder.

Every test builds the hostile file for real (FIFO, socket, symlink, device node when root, sparse
file, folder chains thousands deep, unreadable and read-only folders) and fails if the defence
is removed: a blocking open, a followed link, a recursive walk, an unbounded number of open
descriptors. Deep trees go to /dev/shm when it is there (tmpfs: creating 20,000 folders on a
disk can take seconds by itself).
"""

from __future__ import annotations

import os
import resource
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

from grader.sandbox import files  # noqa: E402
from grader.sandbox.files import UnsafeFile, read_regular, remove_tree, tree_usage  # noqa: E402

IS_ROOT = os.geteuid() == 0


@pytest.fixture
def scratch(tmp_path):
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else str(tmp_path)
    folder = Path(tempfile.mkdtemp(prefix="sf-", dir=base))  # short: socket paths max 107 bytes
    yield folder
    os.chmod(folder, 0o700)
    if not remove_tree(folder) and os.path.lexists(folder):
        subprocess.run(["rm", "-rf", "--", str(folder)], check=False)


def make_chain(top: Path, depth: int, files_every: int = 0) -> None:
    """A chain top/d/d/d/... ``depth`` deep, made fd-relative (the path outgrows PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            if files_every and level % files_every == 0:
                os.close(os.open(f"f{level}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
    finally:
        os.close(fd)


def bind_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()  # the socket file stays


# ----------------------------------------------------------------------------------------------
# read_regular
# ----------------------------------------------------------------------------------------------


@pytest.fixture(params=["lstat first", "fd checks only"])
def precheck(request, monkeypatch):
    """Run each refusal twice: as written, and with the lstat look-ahead fooled into seeing a
    regular file (as when the name is swapped after it), so the O_NOFOLLOW / O_NONBLOCK open and
    the fstat are what must refuse."""
    if request.param == "fd checks only":
        real_stat = os.stat
        regular = os.stat_result((stat.S_IFREG | 0o644, 0, 0, 1, 0, 0, 0, 0, 0, 0))

        def fooled(path, *args, dir_fd=None, follow_symlinks=True):
            if dir_fd is not None and not follow_symlinks:
                real_stat(path, dir_fd=dir_fd, follow_symlinks=False)  # keeps FileNotFoundError
                return regular
            return real_stat(path, *args, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

        monkeypatch.setattr(os, "stat", fooled)
    return request.param


def read_within(seconds: float, *args):
    """read_regular in a thread; fails (instead of hanging) if it has not returned in time."""
    outcome = {}

    def target():
        try:
            outcome["value"] = read_regular(*args)
        except BaseException as e:
            outcome["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    return thread.is_alive(), outcome


def test_fifo_is_refused_without_blocking(scratch, precheck):
    fifo = scratch / "outputs-3.bin"
    os.mkfifo(fifo)
    blocked, outcome = read_within(1.0, scratch, fifo.name, 1000)
    if blocked:  # unblock the reader by opening the write end, so the suite goes on
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("read_regular blocked on a FIFO with no writer")
    assert isinstance(outcome.get("error"), UnsafeFile), outcome
    assert str(outcome["error"]) == "outputs-3.bin is a FIFO, not a regular file"


def test_symlink_to_a_readable_file_is_refused(scratch, precheck):
    target = scratch / "secret.txt"
    target.write_bytes(b"the solution")
    (scratch / "outputs.bin").symlink_to(target)
    with pytest.raises(UnsafeFile, match="outputs.bin"):
        read_regular(scratch, "outputs.bin", 1000)
    (scratch / "shadow").symlink_to("/etc/shadow")
    with pytest.raises(UnsafeFile):
        read_regular(scratch, "shadow", 1 << 20)


def test_directory_is_refused(scratch, precheck):
    (scratch / "outputs.bin").mkdir()
    with pytest.raises(UnsafeFile, match="is a directory"):
        read_regular(scratch, "outputs.bin", 1000)


def test_socket_is_refused(scratch, precheck):
    bind_socket(scratch / "outputs.bin")
    blocked, outcome = read_within(1.0, scratch, "outputs.bin", 1000)
    assert not blocked
    assert isinstance(outcome.get("error"), UnsafeFile), outcome


@pytest.mark.skipif(not IS_ROOT, reason="creating a device node needs root (CAP_MKNOD)")
def test_device_node_is_refused(scratch, precheck):
    os.mknod(scratch / "outputs.bin", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # like /dev/null
    blocked, outcome = read_within(1.0, scratch, "outputs.bin", 1000)
    assert not blocked
    assert isinstance(outcome.get("error"), UnsafeFile), outcome


def test_sparse_file_claiming_10_gb_is_refused_without_reading(scratch):
    huge = scratch / "outputs.bin"
    huge.touch()
    os.truncate(huge, 10 << 30)
    start = time.monotonic()
    with pytest.raises(UnsafeFile, match="over the limit"):
        read_regular(scratch, "outputs.bin", 1 << 20)
    assert time.monotonic() - start < 0.5


def test_size_limit_is_exact(scratch):
    (scratch / "a").write_bytes(b"x" * 100)
    assert read_regular(scratch, "a", 100) == b"x" * 100
    with pytest.raises(UnsafeFile):
        read_regular(scratch, "a", 99)
    (scratch / "empty").write_bytes(b"")
    assert read_regular(str(scratch), "empty", 0) == b""


def test_file_longer_than_it_claims_is_cut_at_the_limit():
    # procfs files report st_size 0 whatever they hold: like a file that grows while being read.
    folder = f"/proc/{os.getpid()}"
    assert os.stat(f"{folder}/status").st_size == 0
    with pytest.raises(UnsafeFile, match="grew past"):
        read_regular(folder, "status", 10)
    assert read_regular(folder, "status", 1 << 20).startswith(b"Name:")


@pytest.mark.parametrize("name", ["a/b", "../a", "..", ".", "", "/etc/passwd"])
def test_names_with_a_path_are_refused(scratch, name):
    with pytest.raises(UnsafeFile):
        read_regular(scratch, name, 1000)


def test_missing_file_is_file_not_found(scratch, precheck):
    with pytest.raises(FileNotFoundError):
        read_regular(scratch, "outputs.bin", 1000)


# ----------------------------------------------------------------------------------------------
# remove_tree
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def few_descriptors():
    """Let the process open only about 48 more files: a walk that keeps one descriptor per
    level fails with EMFILE on a deep chain."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 48, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_removes_a_3000_deep_chain_quickly(scratch, few_descriptors):
    top = scratch / "work"
    top.mkdir()
    make_chain(top, 3000, files_every=500)
    start = time.monotonic()
    assert remove_tree(top) is True
    assert time.monotonic() - start < 2.0
    assert not os.path.lexists(top)


def test_removes_a_20000_deep_chain(scratch, few_descriptors):
    top = scratch / "work"
    top.mkdir()
    make_chain(top, 20_000, files_every=1000)
    assert remove_tree(top, time_limit=60) is True
    assert not os.path.lexists(top)


def test_symlinks_are_removed_not_followed(scratch):
    outside = scratch / "other-student"
    outside.mkdir()
    (outside / "kernel.py").write_text("keep me")
    top = scratch / "work"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "link-to-folder").symlink_to(outside)
    (top / "link-to-file").symlink_to(outside / "kernel.py")
    (top / "dangling").symlink_to(scratch / "nowhere")
    assert remove_tree(top) is True
    assert not os.path.lexists(top)
    assert (outside / "kernel.py").read_text() == "keep me"


def test_top_path_that_is_a_symlink_is_unlinked_not_followed(scratch):
    outside = scratch / "solutions"
    outside.mkdir()
    (outside / "answer.py").write_text("keep me")
    (scratch / "work").symlink_to(outside)
    assert remove_tree(scratch / "work") is True
    assert not os.path.lexists(scratch / "work")
    assert (outside / "answer.py").read_text() == "keep me"
    assert remove_tree(scratch / "never-made") is True


def build_hostile_tree(top: Path) -> None:
    """Unreadable, read-only and special entries, as a child could leave them."""
    (top / "locked" / "inner").mkdir(parents=True)
    (top / "locked" / "inner" / "f").write_text("x")
    (top / "locked" / "f").write_text("x")
    os.chmod(top / "locked" / "inner", 0o000)
    os.chmod(top / "locked", 0o000)
    (top / "readonly").mkdir()
    for i in range(3):
        (top / "readonly" / f"f{i}").write_text("x")
    os.chmod(top / "readonly" / "f0", 0o000)
    os.chmod(top / "readonly", 0o500)
    os.mkfifo(top / "fifo")
    bind_socket(top / "sock")
    (top / "noperm").write_text("x")
    os.chmod(top / "noperm", 0o000)


def test_removes_unreadable_read_only_and_special_entries(scratch):
    top = scratch / "work"
    top.mkdir()
    build_hostile_tree(top)
    if IS_ROOT:
        os.mknod(top / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert remove_tree(top) is True
    assert not os.path.lexists(top)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to switch to an unprivileged uid")
def test_removes_unreadable_and_read_only_folders_as_an_unprivileged_user(scratch):
    # As root, permissions never stop removal; switch to nobody in a forked child so the chmod
    # repairs are what make it work.
    os.chmod(scratch, 0o777)
    pid = os.fork()
    if pid == 0:  # child: no pytest machinery from here on, only os._exit
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            top = scratch / "work"
            top.mkdir()
            build_hostile_tree(top)
            os.chmod(top, 0o000)
            code = 0 if remove_tree(top) is True and not os.path.lexists(top) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_folder_moved_during_removal_stops_it(scratch, monkeypatch):
    # The walk keeps descriptors only for the deepest folders and climbs back through "..".
    # Move a folder whose descriptor was closed out of the tree mid-walk: climbing past it would
    # land in "outer", where an innocent folder shares the name "d". The walk must stop there.
    outer = scratch / "outer"
    top = outer / "work"
    top.mkdir(parents=True)
    make_chain(top, files._OPEN_FOLDERS + 30)
    (outer / "d").mkdir()
    real_rmdir = os.rmdir

    def rmdir_after_move(*args, **kwargs):
        if not (outer / "moved").exists():
            os.rename(top / "d/d/d/d/d", outer / "moved")
        return real_rmdir(*args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir_after_move)
    assert remove_tree(top) is False
    assert (outer / "d").is_dir()


def test_time_limit_zero_stops_without_raising(scratch):
    top = scratch / "work"
    top.mkdir()
    make_chain(top, 50, files_every=5)
    build_hostile_tree(top)
    assert remove_tree(top, time_limit=0) is False
    assert os.path.lexists(top)
    assert remove_tree(top) is True


def test_path_that_is_a_file_is_unlinked(scratch):
    (scratch / "work").write_text("x")
    assert remove_tree(scratch / "work") is True
    assert not os.path.lexists(scratch / "work")


# ----------------------------------------------------------------------------------------------
# tree_usage
# ----------------------------------------------------------------------------------------------


def test_usage_of_a_small_known_tree(scratch):
    top = scratch / "work"
    (top / "a" / "b").mkdir(parents=True)
    (top / "one").write_bytes(b"1" * 5000)
    (top / "a" / "two").write_bytes(b"2" * 70000)
    (top / "a" / "b" / "three").write_bytes(b"")
    sparse = top / "sparse"
    sparse.touch()
    os.truncate(sparse, 10 << 30)  # claims 10 GB, uses nothing
    big_outside = scratch / "outside"
    big_outside.write_bytes(b"x" * 200_000)
    (top / "link").symlink_to(big_outside)  # counted as a link, not as its target
    os.mkfifo(top / "fifo")
    names = ["a", "a/b", "one", "a/two", "a/b/three", "sparse", "link", "fifo"]
    expected = sum(os.lstat(top / n).st_blocks * 512 for n in names)
    used, entries, stopped = tree_usage(top, 1000)
    assert (used, entries, stopped) == (expected, len(names), False)
    assert 75_000 <= used < 1 << 20
    assert tree_usage(top, len(names)) == (expected, len(names), False)


def test_usage_stops_early_on_many_entries(scratch):
    top = scratch / "work"
    top.mkdir()
    for i in range(300):
        (top / f"f{i}").touch()
    used, entries, stopped = tree_usage(top, 100)
    assert stopped is True and entries == 101


def test_usage_survives_a_deep_chain_and_unreadable_folders(scratch, few_descriptors):
    top = scratch / "work"
    top.mkdir()
    make_chain(top, 3000, files_every=100)
    (top / "locked").mkdir()
    (top / "locked" / "f").touch()
    os.chmod(top / "locked", 0o000)
    used, entries, stopped = tree_usage(top, 10**6)
    assert stopped is False
    # 3000 folders, 30 files and "locked" (whose "f" is counted only where root can read it)
    assert entries == 3000 + 30 + 1 + (1 if IS_ROOT else 0)


def test_usage_of_missing_path(scratch):
    assert tree_usage(scratch / "nothing", 10) == (0, 0, False)
