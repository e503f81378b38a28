"""The sandbox that runs untrusted learner code, and this package's public entry point.

``Sandbox`` ties the parts together: it holds the worker slots (``slots``: a dedicated uid and a
GPU each) and a scratch folder (``scratch``), and starts each child (``process.Child``) in a fresh
process group with a scrubbed environment, its own working folder and the configuration of the
boot step (``boot``), which locks the child in before the grader's code (``child``) runs in it.
It also checks what the boot step reports, refusing to run without the protections the shared
machine relies on (``errors.UnsafeSandbox``), under the ``limits.Limits`` of each grading. The
rest of the grader imports everything it needs from here, never from the parts.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import site
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from grader.sandbox import boot as boot_step
from grader.sandbox.boot import SYSTEM_FOLDERS
from grader.sandbox.errors import SandboxError, UnsafeSandbox
from grader.sandbox.files import remove_tree
from grader.sandbox.limits import GiB, Limits
from grader.sandbox.process import Child, ChildEnded
from grader.sandbox.scratch import _copy_package, _process_identity, _remove_stale_scratch
from grader.sandbox.slots import DEFAULT_UID_BASE, Slot, _acquire_uid, _kill_uid, visible_gpu

# What the rest of the grader imports from here (the parts' other names stay theirs).
__all__ = ["ChildEnded", "GiB", "Limits", "Sandbox", "SandboxError", "UnsafeSandbox"]

REPO_ROOT = Path(__file__).resolve().parents[2]


def offers(protections: dict, what: str) -> bool:
    """Whether a child's ``protections`` report (see ``boot``) holds ``what``: "view" (a private
    file-system view), "network" (no network), "processes" (a process limit), "pid_namespace"."""
    readings = {
        "view": lambda: protections.get("filesystem", "").startswith("private view"),
        "network": lambda: protections.get("network", "").startswith("isolated"),
        "processes": lambda: not protections.get("processes", "").startswith("not limited"),
        "pid_namespace": lambda: bool(protections.get("pid_namespace")),
    }
    return readings[what]()


def _python_paths() -> list[str]:
    """Folders the child's Python needs: its installation, the venv, the grader package."""
    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
        *site.getsitepackages(),
    }
    for name in ("LD_LIBRARY_PATH",):
        candidates.update(p for p in os.environ.get(name, "").split(":") if p)
    kept = sorted(p for p in candidates if p and os.path.isdir(p) and p != "/")
    # Drop folders inside another kept one, and ones the system folders already cover.
    result = []
    for path in kept:
        if any(path == s or path.startswith(s + "/") for s in SYSTEM_FOLDERS):
            continue
        if any(path.startswith(p + "/") for p in result):
            continue
        result.append(path)
    return result


class Sandbox:
    """Starts children; holds the worker slots (uids, GPUs) and the scratch folder."""

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        workers: int = 1,
        gpus: list[int] | None = None,
        hide: list[str | Path] = (),
        expose: list[str | Path] = (),
        cuda: bool = False,
        network: str = "isolate",
        allow_unsafe: bool = False,
        uid_base: int | None = None,
    ):
        self.limits = limits or Limits()
        self.cuda = cuda
        self.network = network
        self.allow_unsafe = allow_unsafe
        # The course's solutions (and hidden cases) are never the child's to see, nor the rest of
        # its checkout: where a system folder shows it (a course installed under /opt), it is
        # covered, and the grader package and a venv inside it are shown on top of the cover.
        self.hide = sorted({os.path.realpath(p) for p in (*hide, REPO_ROOT / "solutions", REPO_ROOT) if p})
        _remove_stale_scratch()
        self.scratch = Path(tempfile.mkdtemp(prefix="grader-sandbox-"))
        self.scratch.chmod(0o711)  # children may pass through to their folder, not list it
        (self.scratch / "owner").write_text(_process_identity(os.getpid()))
        # The child imports the grader package from a copy of its Python files: the folder
        # itself may hold more (examples, an nbgrader course with its gradebook).
        package = _copy_package(REPO_ROOT / "grader", self.scratch / "grader-package")
        paths = sorted({os.path.realpath(p) for p in expose if p} | set(_python_paths()))
        self.expose = [(p, p) for p in paths] + [(str(package), str(REPO_ROOT / "grader"))]
        self._slots: queue.Queue[Slot] = queue.Queue()
        self._all_slots: list[Slot] = []
        base = uid_base if uid_base is not None else int(os.environ.get("GRADER_SANDBOX_UID", DEFAULT_UID_BASE))
        try:
            for index in range(max(1, workers)):
                slot = Slot(gpu=gpus[index % len(gpus)] if gpus else None)
                if os.geteuid() == 0:
                    slot.uid, slot.lock_fd = _acquire_uid(base)
                    base = slot.uid + 1
                self._all_slots.append(slot)
                self._slots.put(slot)
        except BaseException:
            self.close()
            raise
        self._probe: dict | None = None
        self._counter = 0

    @contextmanager
    def slot(self):
        slot = self._slots.get()
        try:
            yield slot
        finally:
            self._slots.put(slot)

    def slots_on(self, gpu: int | None) -> int:
        """How many worker slots (gradings at a time) use GPU ``gpu``."""
        return sum(slot.gpu == gpu for slot in self._all_slots)

    def new_shared(self, slot: Slot) -> Path:
        """A folder that the children of one grading share, and no other child sees: Triton's
        cache, so that a submission's kernels compile once for all its children (one student's
        compiled kernels are never another's). Remove it with ``remove_shared``."""
        shared = Path(tempfile.mkdtemp(prefix="shared-", dir=self.scratch))
        if slot.uid is not None:
            os.chown(shared, slot.uid, slot.uid)
        shared.chmod(0o700)
        return shared

    def remove_shared(self, shared: Path) -> None:
        remove_tree(shared, time_limit=self.limits.cleanup_seconds)

    def _env(self, workdir: Path, slot: Slot, shared: Path | None = None) -> dict[str, str]:
        home = workdir / "home"
        env = {
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "TMPDIR": str(home / "tmp"),
            "USER": "learner",
            "LOGNAME": "learner",
            "LANG": "C.UTF-8",
            "TRITON_CACHE_DIR": str(shared or home / "triton-cache"),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            # One CPU thread each: several children share the machine, and every thread
            # counts against the process limit.
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
        }
        if self.cuda:
            env["CUDA_VISIBLE_DEVICES"] = visible_gpu(slot.gpu if slot.gpu is not None else 0)
            for name in ("LD_LIBRARY_PATH", "CUDA_HOME", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH"):
                if name in os.environ:
                    env[name] = os.environ[name]
        else:
            env["TRITON_INTERPRET"] = "1"
            env["GRADER_DEVICE"] = "cpu"
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    def _new_workdir(self, slot: Slot, files: dict[str, bytes | Path]) -> Path:
        self._counter += 1
        workdir = Path(tempfile.mkdtemp(prefix="child-", dir=self.scratch))
        for name, content in files.items():
            target = workdir / name
            if isinstance(content, Path):
                shutil.copyfile(content, target)
            else:
                target.write_bytes(content)
        for sub in ("home", "home/tmp", "home/triton-cache"):
            (workdir / sub).mkdir()
        if slot.uid is not None:
            for folder, _dirs, names in os.walk(workdir):
                os.chown(folder, slot.uid, slot.uid)
                for name in names:
                    os.chown(os.path.join(folder, name), slot.uid, slot.uid)
        workdir.chmod(0o700)
        return workdir

    def memory_bytes(self, limits: Limits) -> int:
        """The host-memory limit: a CUDA context alone takes a few GiB of the data segment."""
        return limits.memory_bytes or (16 * GiB if self.cuda else 4 * GiB)

    def start(
        self,
        slot: Slot,
        files: dict[str, bytes | Path],
        argv_tail: list[str],
        request: dict,
        n_cases: int,
        token: str,
        limits: Limits | None = None,
        shared: Path | None = None,
    ) -> Child:
        """Start ``python -c <bootstrap> <argv_tail>`` in the sandbox with ``files`` in its folder.

        ``request`` (JSON) goes to the child on its request pipe; the child's replies must
        carry ``token``. The child finds the pipes' numbers at the end of its argv. ``shared``: a
        folder from ``new_shared`` for the same slot, writable in the child: its Triton cache."""
        limits = limits or self.limits
        workdir = self._new_workdir(slot, files)
        view_root = Path(tempfile.mkdtemp(prefix="view-", dir=self.scratch))
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        log_path = self.scratch / f"{workdir.name}.log"
        argv = [sys.executable, "-I", "-B", "-u", *argv_tail, str(request_r), str(reply_w)]
        memory = self.memory_bytes(limits)
        address_space = 0 if self.cuda else memory + 6 * GiB
        cfg = {
            "reply_fd": reply_w,
            "request_fd": request_r,
            "token": token,
            "parent_pid": os.getpid(),
            "workdir": str(workdir),
            "view_root": str(view_root),
            "argv": argv,
            "network": self.network,
            "hide": self.hide,
            "expose": self.expose,
            "tmp_bytes": limits.tmp_bytes,
            "uid": slot.uid,
            "shared": str(shared) if shared else None,
            "limits": {
                "cpu_seconds": limits.cpu_seconds(n_cases),
                "memory_bytes": memory,
                "address_space_bytes": address_space,
                "file_bytes": limits.file_bytes,
                "open_files": limits.open_files,
                "processes": limits.processes,
            },
        }
        boot = [sys.executable, "-I", "-S", "-B", str(Path(boot_step.__file__).resolve()), "--boot", json.dumps(cfg)]
        try:
            with open(log_path, "wb") as log:
                popen = subprocess.Popen(
                    boot,
                    cwd=str(workdir),
                    env=self._env(workdir, slot, shared),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(request_r, reply_w),
                    start_new_session=True,
                )
        finally:
            os.close(request_r)
            os.close(reply_w)
        os.set_blocking(request_w, False)
        child = Child(self, slot, workdir, view_root, popen, reply_r, request_w, log_path, token, limits)
        child.shared = shared
        try:
            child.order({**request, "token": token}, time.monotonic() + 10)
        except ChildEnded:
            pass  # it died at once: the first next_event says how
        return child

    def wait_sandbox(self, child: Child) -> dict:
        """The boot step's report of the protections that took effect (first message)."""
        try:
            event = child.next_event(time.monotonic() + 60)
        except ChildEnded as ended:
            raise SandboxError(f"The sandboxed child did not start ({ended.how}):\n{child.log_tail()}") from None
        if event is None or event.get("event") != "sandbox":
            child.close()
            message = (event or {}).get("message", "no report within 60 s")
            raise SandboxError(f"The sandbox could not be set up: {message}\n{child.log_tail()}")
        child.protections = event["protections"]
        self._check_safe(child.protections, child)
        return child.protections

    def _check_safe(self, protections: dict, child: Child | None = None) -> None:
        if self.allow_unsafe:
            return
        if not offers(protections, "processes"):
            if child:
                child.close()
            raise UnsafeSandbox(
                "The child's number of processes cannot be limited (the grader runs as root and "
                "could not switch the child to a dedicated uid), so a fork bomb could take the "
                "machine down. Run the grader as a normal user, or pass allow_unsafe / "
                "--allow-unsafe if this machine is yours alone."
            )

    def probe(self) -> dict:
        """Start a trivial child once and return the protections it got (cached)."""
        if self._probe is None:
            with self.slot() as slot:
                child = self.start(slot, {}, ["-S", "-c", "pass"], {}, 1, os.urandom(8).hex())
                try:
                    protections = self.wait_sandbox(child)
                    try:
                        event = child.next_event(time.monotonic() + 30)
                        raise SandboxError(f"Python does not start inside the sandbox: {event}\n{child.log_tail()}")
                    except ChildEnded as ended:
                        if ended.returncode != 0:
                            raise SandboxError(
                                f"Python does not start inside the sandbox ({ended.how}):\n{child.log_tail()}"
                            ) from None
                finally:
                    child.close()
                self._probe = protections
        return self._probe

    def close(self) -> None:
        for slot in self._all_slots:
            if slot.uid is not None:
                _kill_uid(slot.uid)
            if slot.lock_fd is not None:
                os.close(slot.lock_fd)
                slot.lock_fd = None
        self._all_slots = []
        remove_tree(self.scratch, time_limit=60)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
