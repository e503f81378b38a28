"""Start untrusted code in a child process with every protection this platform allows.

A child starts as ``python sandbox.py --boot <config>``: a few lines of trusted, standard-library
Python (``_boot`` below) that lock the process in before ``exec`` turns it into the grader's child
(``grader/sandbox/child.py``), which only then imports the learner's file. Where the platform permits, the
boot step

- unshares the mount, PID, network, IPC and UTS namespaces (through a user namespace when the
  grader does not run as root): the child has no network, and killing its first process kills
  every process it started, even ones that left its process group;
- builds a new root file system for it: read-only system folders (/usr, /etc, ...), the Python
  installation, the ``grader`` package, fresh /tmp, /var/tmp and /dev/shm, and its private working
  folder holding only the submission's kernel.py and its inputs. Solutions, results, other
  submissions and home folders are not in it (and are covered with empty folders if they lie
  inside an exposed one);
- sets resource limits: CPU seconds, host memory (RLIMIT_DATA; RLIMIT_AS too on the CPU, never on
  CUDA, which reserves a huge address space), file size, processes, open files, no core dumps;
- drops root for a dedicated unprivileged uid, one per worker slot. Linux does not apply
  RLIMIT_NPROC to root at all, so without this step a fork bomb would be limited by nothing.

What could not be set up is recorded in the ``protections`` dict that the child reports first,
and the parent writes it into every result record. The parent starts each child in a fresh
process group (``start_new_session``) with a scrubbed environment, talks to it over inherited
pipes (the learner's code owns stdin/stdout), enforces wall-clock limits itself and kills the
whole group, the PID namespace, and (without one) every process of the slot's uid.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import grp
import json
import os
import platform
import pwd
import queue
import resource
import select
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Only the standard library: this file also runs as the boot script, with -S.

GiB = 1 << 30
MiB = 1 << 20

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203}

# System calls no kernel exercise makes, refused with EPERM by a seccomp filter: debugging or
# reading other processes, mounting, namespaces, kernel keyrings, eBPF, perf counters, modules,
# userfaultfd, file handles. Most already fail for an unprivileged uid; the filter also closes
# the kernel code behind them (a large part of the kernel's attack surface).
# (architecture as the kernel's audit code names it, {name: number}); numbers from the kernel's
# syscall tables (x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: the generic table).
_REFUSED_CALLS = {
    "x86_64": (0xC000003E, {
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165, "umount2": 166,
        "pivot_root": 155, "chroot": 161, "setns": 308, "unshare": 272, "keyctl": 250, "add_key": 248,
        "request_key": 249, "bpf": 321, "perf_event_open": 298, "kexec_load": 246, "kexec_file_load": 320,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "userfaultfd": 323,
        "open_by_handle_at": 304, "name_to_handle_at": 303, "swapon": 167, "swapoff": 168, "reboot": 169,
        "acct": 163, "iopl": 172, "ioperm": 173, "open_tree": 428, "move_mount": 429, "fsopen": 430,
        "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442}),
    "aarch64": (0xC00000B7, {
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "mount": 40, "umount2": 39,
        "pivot_root": 41, "chroot": 51, "setns": 268, "unshare": 97, "keyctl": 219, "add_key": 217,
        "request_key": 218, "bpf": 280, "perf_event_open": 241, "kexec_load": 104, "kexec_file_load": 294,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "userfaultfd": 282,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "swapon": 224, "swapoff": 225, "reboot": 142,
        "acct": 89, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442}),
}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2

# System folders the child may read: enough for Python, PyTorch, Triton and CUDA (its driver
# libraries, and the C compiler Triton uses once per machine). Everything else is absent.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")



def _libc():
    return ctypes.CDLL(None, use_errno=True)


# ----------------------------------------------------------------------------------------------
# The boot step (runs in the child, as trusted code, before anything of the learner's exists)
# ----------------------------------------------------------------------------------------------



def _call(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")



def _send(fd: int, token: str, event: str, **fields) -> None:
    os.write(fd, (json.dumps({"t": token, "event": event, **fields}) + "\n").encode())



def _write_file(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)



def _unshare(libc, cfg: dict, report: dict) -> int:
    """Enter new namespaces; return the flags that took effect."""
    wanted = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if cfg["network"] == "isolate":
        wanted |= CLONE_NEWNET
    uid, gid = os.getuid(), os.getgid()
    # Without root, namespaces come only inside a user namespace of our own.
    user = CLONE_NEWUSER if uid != 0 else 0
    if libc.unshare(user | wanted) == 0:
        done = user | wanted
    else:  # step down gracefully: each namespace on its own where the full set is refused
        done = 0
        if user:
            if libc.unshare(CLONE_NEWUSER) != 0:
                return _report_namespaces(0, report)
            done = CLONE_NEWUSER
        for flag in (CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWUTS):
            if flag & wanted and libc.unshare(flag) == 0:
                done |= flag
    if done & CLONE_NEWUSER:
        # Map our own uid/gid to themselves: the process keeps its identity, holds capabilities
        # inside the new namespaces only (to mount), and loses them at exec.
        try:
            _write_file("/proc/self/setgroups", "deny")
            _write_file("/proc/self/uid_map", f"{uid} {uid} 1")
            _write_file("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as error:  # e.g. a security module that restricts user namespaces
            report["user_namespace_error"] = str(error)
    return _report_namespaces(done, report)



def _report_namespaces(done: int, report: dict) -> int:
    report["user_namespace"] = bool(done & CLONE_NEWUSER)
    report["network"] = "isolated (no network)" if done & CLONE_NEWNET else "not isolated"
    report["pid_namespace"] = bool(done & CLONE_NEWPID)
    return done



def _mount(libc, source, target, fstype, flags, data=None) -> None:
    _call(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                     flags, data and data.encode()), f"mount {source} on {target}")



def _bind(libc, source: str, target: str, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    _mount(libc, source, target, None, MS_BIND | MS_REC)
    if read_only:
        # A remount must keep the flags the kernel locked on the original mount (nosuid, ...).
        _mount(libc, None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _kept_flags(target))



def _kept_flags(path: str) -> int:
    """The mount flags of ``path`` that a bind remount must repeat (statvfs -> mount bits)."""
    have = os.statvfs(path).f_flag
    pairs = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
             (os.ST_NOATIME, 1024), (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21))
    return sum(bit for st, bit in pairs if have & st)



def _pivot(libc, new_root: str) -> str:
    """Make new_root the root of this mount namespace and detach the old one."""
    number = SYS_PIVOT_ROOT.get(platform.machine())
    os.chdir(new_root)
    if number is not None and libc.syscall(number, b".", b".") == 0:
        _call(libc.umount2(b".", MNT_DETACH), "detach the old root")
        os.chdir("/")
        return "pivot_root"
    os.chroot(".")  # older or unknown architectures: the uid drop keeps the child from escaping
    os.chdir("/")
    return "chroot"



def _build_view(libc, cfg: dict, flags: int, report: dict) -> None:
    """A new root file system holding only what the child needs (see the module docstring)."""
    new_root = cfg["view_root"]
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back out
    _mount(libc, "tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in PRIVATE_TMP[:2]:  # first, so that folders exposed below /tmp stay visible
        os.makedirs(new_root + path, exist_ok=True)
        _mount(libc, "tmpfs", new_root + path, "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={cfg['tmp_bytes']},mode=1777")
    exposed: list[str] = []
    for path in SYSTEM_FOLDERS:
        if not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        if real != path and os.path.islink(path):  # /lib -> usr/lib: recreate the link
            os.makedirs(os.path.dirname(new_root + path), exist_ok=True)
            if not os.path.lexists(new_root + path):
                os.symlink(os.readlink(path), new_root + path)
        if not any(real == done or real.startswith(done + "/") for done in exposed):
            _bind(libc, real, new_root + real, read_only=True)
            exposed.append(real)
    for source, target in cfg["expose"]:  # Python, the venv, the grader package's files
        if os.path.exists(source) and not any(target == d or target.startswith(d + "/") for d in exposed):
            _bind(libc, source, new_root + target, read_only=True)
            exposed.append(target)
    for path in ("/sys", "/dev"):  # devices must stay writable (/dev/null, the GPU)
        if os.path.isdir(path):
            _bind(libc, path, new_root + path, read_only=path == "/sys")
    if os.path.isdir(new_root + "/dev/shm"):
        _mount(libc, "tmpfs", new_root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={cfg['tmp_bytes']},mode=1777")
    _bind(libc, cfg["workdir"], new_root + cfg["workdir"], read_only=False)
    if cfg.get("shared"):  # the folder the children of one grading share (Triton's cache)
        _bind(libc, cfg["shared"], new_root + cfg["shared"], read_only=False)
    covered = []
    for path in cfg["hide"]:  # secrets that lie inside an exposed folder get an empty cover
        target = new_root + path
        if os.path.isdir(target) and not os.path.islink(target):
            _mount(libc, "tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
            covered.append(path)
        elif os.path.isfile(target):
            _mount(libc, "/dev/null", target, None, MS_BIND)
            covered.append(path)
    os.makedirs(new_root + "/proc", exist_ok=True)
    try:  # a fresh /proc shows only the child's own processes (needs the PID namespace)
        if not flags & CLONE_NEWPID:
            raise OSError(errno.EPERM, "no PID namespace")
        _mount(libc, "proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        report["proc"] = "private: only the child's own processes"
    except OSError:
        _bind(libc, "/proc", new_root + "/proc", read_only=False)
        report["proc"] = "the host's (no PID namespace)"
    how = _pivot(libc, new_root)  # the point of no return: the view is complete
    try:
        _mount(libc, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        pass  # the view's own root stays writable by root only; the child is not root
    report["filesystem"] = (f"private view ({how}): read-only system folders, Python and the grader "
                            "package; its own working folder; empty /tmp")
    report["hidden_paths"] = covered



def _limits(cfg: dict, report: dict) -> None:
    limits = cfg["limits"]
    wanted = {
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_CPU: limits["cpu_seconds"],
        resource.RLIMIT_FSIZE: limits["file_bytes"],
        resource.RLIMIT_DATA: limits["memory_bytes"],
        resource.RLIMIT_NOFILE: limits["open_files"],
    }
    if limits.get("address_space_bytes"):
        wanted[resource.RLIMIT_AS] = limits["address_space_bytes"]
    for which, value in wanted.items():
        soft, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        hard_value = value + 5 if which == resource.RLIMIT_CPU and hard == resource.RLIM_INFINITY else value
        resource.setrlimit(which, (value, hard_value))
    report["limits"] = {"cpu_seconds": limits["cpu_seconds"], "memory_bytes": limits["memory_bytes"],
                        "address_space_bytes": limits.get("address_space_bytes") or None,
                        "file_bytes": limits["file_bytes"], "open_files": limits["open_files"]}



def _count_tasks(uid: int) -> int:
    """Threads and processes of ``uid`` (what RLIMIT_NPROC counts)."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as status:
                    fields = dict(line.split(":", 1) for line in status if ":" in line)
                if int(fields["Uid"].split()[0]) == uid:
                    total += int(fields["Threads"])
            except (OSError, KeyError, ValueError):
                pass
    return total



def _credentials(cfg: dict, flags: int, report: dict) -> None:
    processes = cfg["limits"]["processes"]
    uid = cfg.get("uid")
    if os.getuid() == 0 and uid is not None:
        # Order matters: limits first (lowering needs no privilege), then groups, gid, uid.
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        report["user"] = f"uid {uid} (dedicated to this worker)"
        report["processes"] = f"at most {processes} (processes and threads)"
    elif os.getuid() == 0:
        report["user"] = "root"
        report["processes"] = "not limited: Linux does not apply RLIMIT_NPROC to root"
    elif flags & CLONE_NEWUSER:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        report["user"] = f"uid {os.getuid()} in a user namespace"
        report["processes"] = f"at most {processes} (processes and threads)"
    else:
        # RLIMIT_NPROC counts every process of this uid, so leave room for the ones running.
        allowed = _count_tasks(os.getuid()) + processes
        resource.setrlimit(resource.RLIMIT_NPROC, (allowed, allowed))
        report["user"] = f"uid {os.getuid()} (the grader's own)"
        report["processes"] = f"at most {processes} more than the uid already runs"



def _syscall_filter(libc, report: dict) -> None:
    """Install the seccomp filter of ``_REFUSED_CALLS`` (classic BPF, no library needed)."""
    machine = platform.machine()
    if machine not in _REFUSED_CALLS:
        report["syscall_filter"] = f"none (no table for {machine})"
        return
    audit_arch, calls = _REFUSED_CALLS[machine]
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
    allow, refuse, kill = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x80000000
    numbers = sorted(calls.values())
    refuse_at = 6 + len(numbers)  # index of the "refuse" return, after the "allow" one
    program = [(ld, 0, 0, 4), (jeq, 1, 0, audit_arch), (ret, 0, 0, kill),  # a foreign ABI: stop
               (ld, 0, 0, 0), (jge, refuse_at - 5, 0, 0x40000000)]  # x32 calls on x86_64
    program += [(jeq, refuse_at - (5 + i) - 1, 0, number) for i, number in enumerate(numbers)]
    program += [(ret, 0, 0, allow), (ret, 0, 0, refuse)]

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    instructions = (Instruction * len(program))(*[Instruction(*step) for step in program])
    fprog = Program(len(program), ctypes.cast(instructions, ctypes.POINTER(Instruction)))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        report["syscall_filter"] = f"none ({os.strerror(ctypes.get_errno())})"
        return
    report["syscall_filter"] = f"{len(numbers)} system calls refused (ptrace, mount, unshare, bpf, perf_event_open, ...)"


def _mirror_exit(pid: int, fds: list[int]) -> None:
    """Outside the PID namespace: wait for its first process and exit the way it did."""
    for fd in fds:
        os.close(fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)



def _boot(cfg: dict) -> None:
    libc = _libc()
    fd, token = cfg["reply_fd"], cfg["token"]
    report: dict = {}
    try:
        _call(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
        if os.getppid() != cfg["parent_pid"]:
            os._exit(1)  # the grader is already gone
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        flags = _unshare(libc, cfg, report)
        if flags & CLONE_NEWPID:
            pid = os.fork()  # the child becomes process 1 of the new PID namespace
            if pid:
                _mirror_exit(pid, [cfg["request_fd"], fd])
        report["filesystem"] = "not isolated: the child can read what its uid can read"
        report["hidden_paths"] = []
        if flags & CLONE_NEWNS:
            try:
                _build_view(libc, cfg, flags, report)
            except OSError as error:  # nothing has changed for this process yet: carry on without
                report["filesystem"] = f"not isolated: the private view failed ({error})"
        _limits(cfg, report)
        _credentials(cfg, flags, report)
        _call(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl")
        _call(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")  # reset by setuid
        _syscall_filter(libc, report)  # last: the steps above need mount, unshare and pivot_root
        if not flags & CLONE_NEWPID and os.getppid() != cfg["parent_pid"]:
            os._exit(1)
        os.umask(0o077)
        os.chdir(cfg["workdir"])
        _send(fd, token, "sandbox", protections=report)
        argv = cfg["argv"]
        os.execv(argv[0], argv)
    except BaseException as error:  # tell the parent precisely, it is the grader's problem
        try:
            _send(fd, token, "sandbox_error", message=f"{type(error).__name__}: {error}", protections=report)
        finally:
            os._exit(70)


# ----------------------------------------------------------------------------------------------
# The parent's side
# ----------------------------------------------------------------------------------------------


REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_UID_BASE = 59000


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the learner's code): nothing should be recorded."""


class UnsafeSandbox(SandboxError):
    """A protection that the shared machine relies on is missing (see ``allow_unsafe``)."""


@dataclass
class Limits:
    """Resource limits for one child process."""
    # Time limits count the child's CPU time, which a busy machine hardly changes; wall time
    # only backs them up (``wall_factor`` times longer), for a child that waits without
    # computing (a GPU kernel that never ends, a sleep).
    case_seconds: float = 60.0  # one call of the API
    startup_seconds: float = 90.0  # importing torch, Triton and the learner's file
    wall_factor: float = 10.0
    memory_bytes: int | None = None  # host memory (RLIMIT_DATA); default 4 GiB, 16 GiB on CUDA
    processes: int = 64  # processes and threads (RLIMIT_NPROC)
    file_bytes: int = 2 * GiB  # largest file the child may write (RLIMIT_FSIZE)
    disk_bytes: int = 4 * GiB  # everything in its working folder together (parent watches)
    tmp_bytes: int = 64 * MiB  # each private tmpfs (/tmp, /var/tmp, /dev/shm)
    open_files: int = 1024
    cleanup_seconds: float = 30.0  # removing what the child left in its folder

    def cpu_seconds(self, n_cases: int) -> int:
        return int(self.startup_seconds + self.case_seconds * max(n_cases, 1)) + 10


@dataclass
class Slot:
    """One worker's identity: its sandbox uid (when the grader is root) and its GPU."""
    uid: int | None = None
    gpu: int | None = None
    lock_fd: int | None = None


def _uid_in_use(uid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as status:
                    for line in status:
                        if line.startswith("Uid:"):
                            if str(uid) in line.split()[1:]:
                                return True
                            break
            except OSError:
                pass
    return False


def _acquire_uid(base: int) -> tuple[int, int]:
    """A uid that no user, group or process has, locked for this process (flock)."""
    lock_dir = Path("/tmp/grader-sandbox-uids")  # fixed: every grader on the machine must share it
    lock_dir.mkdir(mode=0o700, exist_ok=True)
    if lock_dir.is_symlink() or lock_dir.stat().st_uid != os.getuid():
        raise SandboxError(f"{lock_dir} is not owned by the grader's user; remove it.")
    for uid in range(base, base + 2000):
        try:
            pwd.getpwuid(uid)
            continue
        except KeyError:
            pass
        try:
            grp.getgrgid(uid)
            continue
        except KeyError:
            pass
        fd = os.open(lock_dir / f"{uid}.lock", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        if _uid_in_use(uid):
            os.close(fd)
            continue
        return uid, fd
    raise SandboxError(f"No free uid in {base}..{base + 1999} for the sandbox.")


def _kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` (ours alone: no user owns it and we hold its lock).

    ``kill -9 -1`` run as that uid signals exactly the processes the uid owns."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    if kill:
        subprocess.run([kill, "-9", "-1"], user=uid, group=uid, extra_groups=[], env={},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=False)
        return
    pid = os.fork()
    if pid == 0:  # only system calls from here on: safe even in a threaded parent
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


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


def _python_paths() -> list[str]:
    """Folders the child's Python needs: its installation, the venv, the grader package."""
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))),
                  *site.getsitepackages()}
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


def _process_identity(pid: int) -> str:
    """pid, start time and PID namespace: a pid alone may be reused, or mean another process in
    another namespace that shares /tmp."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            started = stat.read().rsplit(")", 1)[1].split()[19]
        return f"{pid} {started} {os.readlink(f'/proc/{pid}/ns/pid')}"
    except (OSError, IndexError):
        return ""


def _remove_stale_scratch() -> None:
    """Delete scratch folders of graders that were killed (SIGKILL leaves them behind)."""
    from grader.sandbox.files import remove_tree

    namespace = os.readlink("/proc/self/ns/pid")
    for folder in Path(tempfile.gettempdir()).glob("grader-sandbox-*"):
        try:
            if folder.stat().st_uid != os.getuid():
                continue
            parts = (folder / "owner").read_text().split()
        except OSError:
            continue
        if len(parts) == 3 and parts[0].isdigit() and parts[2] == namespace \
                and _process_identity(int(parts[0])) != " ".join(parts):
            remove_tree(folder, time_limit=60)


def _copy_package(source: Path, target: Path) -> Path:
    """The .py files of a package and of its subpackages, readable by every uid."""
    target.mkdir(mode=0o755)
    for path in source.glob("*.py"):
        shutil.copyfile(path, target / path.name)
        (target / path.name).chmod(0o644)
    for sub in source.iterdir():
        if sub.is_dir() and (sub / "__init__.py").is_file():
            _copy_package(sub, target / sub.name)
    return target


class ChildEnded(Exception):
    """The child process is gone (or was killed); ``how`` says why, for the record;
    ``returncode`` is how it exited, None where the grader ended it (a limit it watches)."""

    def __init__(self, how: str, returncode: int | None):
        super().__init__(how)
        self.how = how
        self.returncode = returncode


class Child:
    """A running sandboxed child: its events, its working folder, and how to stop it."""

    def __init__(self, sandbox: "Sandbox", slot: Slot, workdir: Path, view_root: Path,
                 popen: subprocess.Popen, reply_fd: int, order_fd: int, log_path: Path, token: str,
                 limits: Limits):
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

    def cpu_seconds(self) -> float:
        """CPU time used so far by the child and every process it started (what they have
        running now). Unlike wall time it hardly depends on how busy the machine is, so time
        limits are judged on it (see grader.grade.runphase)."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in (self.popen.pid, *_descendants(self.popen.pid)):
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
                data = data[os.write(self.order_fd, data):]
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

    def give(self, name: str, data: bytes) -> None:
        """Put a file the child will read into its folder. The name must be new: a file, link or
        FIFO the child placed there beforehand makes this fail instead of being followed."""
        folder = os.open(self.workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o644, dir_fd=folder)
        finally:
            os.close(folder)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o644)  # whatever the grader's umask: the child's uid must read it
            handle.write(data)

    def discard(self, name: str) -> None:
        """Delete a file of the child's folder (unlink never follows a link)."""
        try:
            os.unlink(self.workdir / name)
        except OSError:
            pass

    def take(self, name: str, max_bytes: int) -> bytes:
        """A regular file the child left in its folder, read within ``max_bytes`` and never
        through a link, a FIFO or a device (see ``grader.sandbox.files``)."""
        from grader.sandbox.files import read_regular  # (not at the top: this file is also the boot script)

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
        from grader.sandbox.files import tree_usage

        total, count, _stopped = tree_usage(self.workdir, 10_000)
        if self.shared is not None:
            more, files, _stopped = tree_usage(self.shared, 10_000)
            total, count = total + more, count + files
        if total > self.limits.disk_bytes or count > 10_000:
            self.kill()
            raise ChildEnded(f"wrote more than {self.limits.disk_bytes // MiB} MiB or 10,000 "
                             "files to its working folder", None)

    def kill(self) -> None:
        """Stop the child and everything it started."""
        if self.popen.poll() is None:
            inner = _descendants(self.popen.pid)
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
        from grader.sandbox.files import remove_tree

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
        meaning = {"SIGKILL": " (killed: a time, memory or CPU limit, or the grader)",
                   "SIGSEGV": " (a segmentation fault: an invalid memory access)",
                   "SIGXCPU": " (the CPU-time limit)", "SIGXFSZ": " (the file-size limit)",
                   "SIGBUS": " (a bus error: an invalid memory access)",
                   "SIGABRT": " (aborted: often the memory allocator finding its heap damaged)"}.get(name, "")
        return f"ended by {name}{meaning}"
    return f"exited with code {code}"


def visible_gpu(index: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry that makes a child see this process's GPU ``index``:
    where this process itself sees only some GPUs (a Ray worker, or a grader started with
    ``CUDA_VISIBLE_DEVICES=2,3``), its index 0 is the first GPU of that list, not the machine's."""
    mine = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    return mine[index] if "CUDA_VISIBLE_DEVICES" in os.environ and index < len(mine) else str(index)


class Sandbox:
    """Starts children; holds the worker slots (uids, GPUs) and the scratch folder."""

    def __init__(self, *, limits: Limits | None = None, workers: int = 1, gpus: list[int] | None = None,
                 hide: list[str | Path] = (), expose: list[str | Path] = (), cuda: bool = False,
                 network: str = "isolate", allow_unsafe: bool = False, uid_base: int | None = None):
        self.limits = limits or Limits()
        self.cuda = cuda
        self.network = network
        self.allow_unsafe = allow_unsafe
        # The course's solutions (and hidden cases) are never the child's to see.
        self.hide = sorted({os.path.realpath(p) for p in (*hide, REPO_ROOT / "solutions") if p})
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
        from grader.sandbox.files import remove_tree

        remove_tree(shared, time_limit=self.limits.cleanup_seconds)

    def _env(self, workdir: Path, slot: Slot, shared: Path | None = None) -> dict[str, str]:
        home = workdir / "home"
        env = {
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home), "TMPDIR": str(home / "tmp"), "USER": "learner", "LOGNAME": "learner",
            "LANG": "C.UTF-8", "TRITON_CACHE_DIR": str(shared or home / "triton-cache"),
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
            # One CPU thread each: several children share the machine, and every thread
            # counts against the process limit.
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
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
            for folder, dirs, names in os.walk(workdir):
                os.chown(folder, slot.uid, slot.uid)
                for name in names:
                    os.chown(os.path.join(folder, name), slot.uid, slot.uid)
        workdir.chmod(0o700)
        return workdir

    def memory_bytes(self, limits: Limits) -> int:
        """The host-memory limit: a CUDA context alone takes a few GiB of the data segment."""
        return limits.memory_bytes or (16 * GiB if self.cuda else 4 * GiB)

    def start(self, slot: Slot, files: dict[str, bytes | Path], argv_tail: list[str], request: dict,
              n_cases: int, token: str, limits: Limits | None = None, shared: Path | None = None) -> Child:
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
            "reply_fd": reply_w, "request_fd": request_r, "token": token, "parent_pid": os.getpid(),
            "workdir": str(workdir), "view_root": str(view_root), "argv": argv,
            "network": self.network, "hide": self.hide, "expose": self.expose,
            "tmp_bytes": limits.tmp_bytes, "uid": slot.uid, "shared": str(shared) if shared else None,
            "limits": {"cpu_seconds": limits.cpu_seconds(n_cases), "memory_bytes": memory,
                       "address_space_bytes": address_space, "file_bytes": limits.file_bytes,
                       "open_files": limits.open_files, "processes": limits.processes},
        }
        boot = [sys.executable, "-I", "-S", "-B", str(Path(__file__).resolve()), "--boot", json.dumps(cfg)]
        try:
            with open(log_path, "wb") as log:
                popen = subprocess.Popen(boot, cwd=str(workdir), env=self._env(workdir, slot, shared),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         pass_fds=(request_r, reply_w), start_new_session=True)
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
        if protections.get("processes", "").startswith("not limited"):
            if child:
                child.close()
            raise UnsafeSandbox(
                "The child's number of processes cannot be limited (the grader runs as root and "
                "could not switch the child to a dedicated uid), so a fork bomb could take the "
                "machine down. Run the grader as a normal user, or pass allow_unsafe / "
                "--allow-unsafe if this machine is yours alone.")

    def probe(self) -> dict:
        """Start a trivial child once and return the protections it got (cached)."""
        if self._probe is None:
            with self.slot() as slot:
                child = self.start(slot, {}, ["-S", "-c", "pass"], {}, 1, os.urandom(8).hex())
                try:
                    protections = self.wait_sandbox(child)
                    try:
                        event = child.next_event(time.monotonic() + 30)
                        raise SandboxError(f"Python does not start inside the sandbox: {event}\n"
                                           f"{child.log_tail()}")
                    except ChildEnded as ended:
                        if ended.returncode != 0:
                            raise SandboxError(f"Python does not start inside the sandbox "
                                               f"({ended.how}):\n{child.log_tail()}") from None
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
        from grader.sandbox.files import remove_tree

        remove_tree(self.scratch, time_limit=60)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--boot":
    _boot(json.loads(sys.argv[2]))
