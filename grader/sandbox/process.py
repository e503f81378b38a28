"""A running sandboxed child as the parent sees it: orders in, events out, limits watched, killed.

``Child`` is the parent's half of ``grader/sandbox/child.py``. It talks to the child over two
inherited pipes (the learner's code owns stdin and stdout): orders go out without ever blocking
past a deadline, and only reply lines carrying the child's token count as events, every other
line being forged or garbled. It enforces what the kernel cannot (the disk use of the child's
folders, the size of its channel), and raises ``ChildEnded`` once the process is gone. Killing it
kills the whole process group, the PID namespace, and without one every process of the slot's
uid, so nothing the learner started outlives it; closing it removes what it left, without
following or recursing into anything it planted (``grader.sandbox.files``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections import deque
from pathlib import Path

from grader.sandbox.files import read_regular, remove_tree, tree_usage
from grader.sandbox.limits import Limits, MiB
from grader.sandbox.slots import Slot, _kill_uid

# How long ``Process.cpu_seconds`` keeps its list of a child's processes.
TREE_SECONDS = 1.0


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
                parents.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class ChildEnded(Exception):
    """The child process is gone (or was killed); ``how`` says why, for the record;
    ``returncode`` is how it exited, None where the grader ended it (a limit it watches)."""

    def __init__(self, how: str, returncode: int | None):
        super().__init__(how)
        self.how = how
        self.returncode = returncode


class Child:
    """A running sandboxed child: its events, its working folder, and how to stop it."""

    # sandbox: the Sandbox that started it (unannotated: isolation.py imports this file, not the reverse)
    def __init__(
        self,
        sandbox,
        slot: Slot,
        workdir: Path,
        view_root: Path,
        popen: subprocess.Popen,
        reply_fd: int,
        order_fd: int,
        log_path: Path,
        token: str,
        limits: Limits,
    ):
        self.sandbox, self.slot, self.workdir, self.popen = sandbox, slot, workdir, popen
        self.order_fd: int | None = order_fd
        self.view_root = view_root
        self.reply_fd, self.log_path, self.token, self.limits = reply_fd, log_path, token, limits
        self.shared: Path | None = None  # the grading's shared folder, watched like the workdir
        self.protections: dict = {}
        self.ignored_lines = 0
        self.processes_seen = 0
        self._buffer = b""
        self._events: deque = deque()
        self._next_disk_check = 0.0
        self._closed = False
        self.leftovers: list[str] = []  # folders cleanup could not remove in time
        self._tree: list[int] = []  # the child's processes as last listed (``cpu_seconds``)
        self._tree_until = 0.0

    def _listed(self) -> list[int]:
        """The child's processes (not the child itself), listed afresh; kept for ``cpu_seconds``."""
        self._tree, self._tree_until = _descendants(self.popen.pid), time.monotonic() + TREE_SECONDS
        return self._tree

    def cpu_seconds(self) -> float:
        """CPU time used so far by the child and every process it started (what they have
        running now). Unlike wall time it hardly depends on how busy the machine is, so time
        limits are judged on it (see grader.grade.runphase).

        Listing the child's processes reads every process's entry in /proc (10 ms with 500
        processes, as a busy grading machine has), and a grading reads its CPU time several
        times a case: the list is kept for ``TREE_SECONDS``, and only the listed processes' own
        entries are read in between. A process started meanwhile is counted from the next listing
        on, with all the CPU time it has used by then."""
        ticks = os.sysconf("SC_CLK_TCK")
        if time.monotonic() >= self._tree_until:
            self._listed()
        total = 0
        for pid in (self.popen.pid, *self._tree):
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
            except (OSError, ValueError, IndexError):
                pass
        return total / ticks

    def order(self, message: dict, deadline: float) -> None:
        """Send one order (a JSON line) without ever blocking past ``deadline``: a child that
        stops reading its orders must not stall the grader."""
        data = (json.dumps(message) + "\n").encode()
        while data:
            if self.order_fd is None:
                raise ChildEnded("closed the grader's order pipe", None)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChildEnded("stopped reading the grader's orders", None)
            if not select.select([], [self.order_fd], [], min(remaining, 0.25))[1]:
                continue
            try:
                data = data[os.write(self.order_fd, data) :]
            except BlockingIOError:
                continue
            except OSError:
                self.end_orders()
                raise ChildEnded("closed the grader's order pipe", None) from None

    def end_orders(self) -> None:
        """No more orders: the child finishes once it reads the end of the pipe."""
        if self.order_fd is not None:
            os.close(self.order_fd)
            self.order_fd = None

    def give(self, name: str, data) -> None:
        """Put a file the child will read into its folder: ``data``, bytes or a function that
        writes them to the binary file it is given. The name must be new: a file, link or FIFO
        the child placed there beforehand makes this fail instead of being followed."""
        folder = os.open(self.workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(
                name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder
            )
        finally:
            os.close(folder)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o644)  # whatever the grader's umask: the child's uid must read it
            if callable(data):
                data(handle)
            else:
                handle.write(data)

    def discard(self, name: str) -> None:
        """Delete a file of the child's folder (unlink never follows a link)."""
        try:
            os.unlink(self.workdir / name)
        except OSError:
            pass

    def size(self, name: str) -> int:
        """The size in bytes of a file the child left in its folder (a link's own size; 0 if absent)."""
        try:
            return os.lstat(self.workdir / name).st_size
        except OSError:
            return 0

    def take(self, name: str, max_bytes: int) -> bytes:
        """A regular file the child left in its folder, read within ``max_bytes`` and never
        through a link, a FIFO or a device (see ``grader.sandbox.files``)."""
        return read_regular(self.workdir, name, max_bytes)

    def next_event(self, deadline: float) -> dict | None:
        """The child's next message, or None when ``deadline`` (monotonic) passes first.

        Raises ChildEnded when the process exits or breaks a limit the parent watches."""
        while not self._events:
            now = time.monotonic()
            if now >= deadline:
                return None
            ready, _, _ = select.select([self.reply_fd], [], [], min(deadline - now, 0.25))
            if ready:
                data = os.read(self.reply_fd, 1 << 16)
                if data:
                    self._take(data)
                    continue
                self._ended()  # end of file: every copy of the write end is closed
            if self.popen.poll() is not None:
                self._drain()
                if not self._events:
                    self._ended()
            self._watch_disk()
        return self._events.popleft()

    def _take(self, data: bytes) -> None:
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > 1 << 20:
            self.kill()
            raise ChildEnded("wrote more than 1 MiB without a line break on the grader's channel", None)
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict) and message.get("t") == self.token:
                message["received_at"] = time.monotonic()  # the parent's clock, for timing
                self._events.append(message)
                if len(self._events) > 1000:  # the harness sends a few per call: a flood is forged
                    self.kill()
                    raise ChildEnded("flooded the grader's channel with messages", None)
            else:  # a forged or garbled line: results never come from such lines
                self.ignored_lines += 1

    def _drain(self) -> None:
        while select.select([self.reply_fd], [], [], 0)[0]:
            data = os.read(self.reply_fd, 1 << 16)
            if not data:
                return
            self._take(data)

    def _ended(self) -> None:
        try:
            code = self.popen.wait(timeout=2)
            how = describe_exit(code)
        except subprocess.TimeoutExpired:  # it closed the grader's channel but lives on
            how, code = "closed the grader's channel and was stopped", None  # (None: the grader ended it)
        self.kill()
        raise ChildEnded(how, code)

    def _watch_disk(self) -> None:
        now = time.monotonic()
        if now < self._next_disk_check:
            return
        self._next_disk_check = now + 1.0
        total, count, _stopped = tree_usage(self.workdir, 10_000)
        if self.shared is not None:
            more, files, _stopped = tree_usage(self.shared, 10_000)
            total, count = total + more, count + files
        if total > self.limits.disk_bytes or count > 10_000:
            self.kill()
            raise ChildEnded(
                f"wrote more than {self.limits.disk_bytes // MiB} MiB or 10,000 files to its working folder", None
            )

    def _signal_all(self, signum: int) -> None:
        for pid in self._listed():
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(self.popen.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def pause(self) -> None:
        """Freeze the child and everything it started (SIGSTOP): it holds its memory but runs
        nothing, so it may wait for the GPU while another grading is timed."""
        if self.popen.poll() is None:
            self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        """Undo ``pause``."""
        if self.popen.poll() is None:
            self._signal_all(signal.SIGCONT)

    def kill(self) -> None:
        """Stop the child and everything it started."""
        if self.popen.poll() is None:
            inner = self._listed()
            self.processes_seen = max(self.processes_seen, len(inner) + 1)
            # Inner processes first (with a PID namespace, its first process takes all the
            # others with it): the boot process then reaps them and exits by itself, so no
            # zombie is left for the machine's init to collect.
            for pid in inner:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)  # the boot process and its group
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if self.slot.uid is not None and not self.protections.get("pid_namespace"):
            _kill_uid(self.slot.uid)  # processes that left the group (setsid) die too

    def log_tail(self, limit: int = 8000) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(max(0, os.path.getsize(self.log_path) - limit))
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        """Stop the child and delete its folder, its file system view and its log."""
        if self._closed:
            return
        self._closed = True
        self.kill()
        self.end_orders()
        os.close(self.reply_fd)
        # Whatever the child left (a folder chain thousands deep, FIFOs, unreadable folders):
        # removed without recursion and within a time limit; leftovers never stop grading.
        for folder in (self.workdir, self.view_root):
            if not remove_tree(folder, time_limit=self.limits.cleanup_seconds):
                self.leftovers.append(str(folder))
        try:
            self.log_path.unlink()
        except OSError:
            pass


def describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped by the grader"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        meaning = {
            "SIGKILL": " (killed: a time, memory or CPU limit, or the grader)",
            "SIGSEGV": " (a segmentation fault: an invalid memory access)",
            "SIGXCPU": " (the CPU-time limit)",
            "SIGXFSZ": " (the file-size limit)",
            "SIGBUS": " (a bus error: an invalid memory access)",
            "SIGABRT": " (aborted: often the memory allocator finding its heap damaged)",
        }.get(name, "")
        return f"ended by {name}{meaning}"
    return f"exited with code {code}"
