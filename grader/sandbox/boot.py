"""The boot step: what runs in a new child before any of the grader's or the learner's code.

A child starts as ``python -I -S -B boot.py --boot <config>``: a few lines of trusted,
standard-library Python (``_boot``) that lock the process in with every protection the platform
allows (namespaces, a private file-system view entered by pivot_root, resource limits, a
dedicated uid, a seccomp filter) before ``exec`` turns it into the grader's child
(``grader/sandbox/child.py``), which only then imports the learner's file. What could not be set
up is recorded in the ``protections`` dict that the child reports first, and the parent writes it
into every result record. It is a file of its own because it runs as a script, with -I and -S:
no site-packages and its own folder not on sys.path, so it may import only the standard library,
never a sibling; the parent imports it just for its path and ``SYSTEM_FOLDERS``.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import resource
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203}

# System calls no kernel exercise makes, refused with EPERM by a seccomp filter: debugging or
# reading other processes, mounting, namespaces, kernel keyrings, eBPF, perf counters, modules,
# userfaultfd, file handles. Most already fail for an unprivileged uid; the filter also closes
# the kernel code behind them (a large part of the kernel's attack surface).
# (architecture as the kernel's audit code names it, {name: number}); numbers from the kernel's
# syscall tables (x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64: the generic table).
_REFUSED_CALLS = {
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "setns": 308,
            "unshare": 272,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "bpf": 321,
            "perf_event_open": 298,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "userfaultfd": 323,
            "open_by_handle_at": 304,
            "name_to_handle_at": 303,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "acct": 163,
            "iopl": 172,
            "ioperm": 173,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "setns": 268,
            "unshare": 97,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "bpf": 280,
            "perf_event_open": 241,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "userfaultfd": 282,
            "open_by_handle_at": 265,
            "name_to_handle_at": 264,
            "swapon": 224,
            "swapoff": 225,
            "reboot": 142,
            "acct": 89,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
        },
    ),
}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2

# System folders the child may read: enough for Python, PyTorch, Triton and CUDA (its driver
# libraries, and the C compiler Triton uses once per machine). Everything else is absent.
SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")


def _libc():
    return ctypes.CDLL(None, use_errno=True)


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
    _call(
        libc.mount(
            source and source.encode(), target.encode(), fstype and fstype.encode(), flags, data and data.encode()
        ),
        f"mount {source} on {target}",
    )


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
    pairs = (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, 1024),
        (os.ST_NODIRATIME, 2048),
        (os.ST_RELATIME, 1 << 21),
    )
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


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _cover(libc, target: str) -> bool:
    """An empty cover over a secret that an exposed folder shows (a folder: an empty tmpfs, owned
    by root; a file: /dev/null); False where the view does not show it."""
    if os.path.isdir(target) and not os.path.islink(target):
        _mount(libc, "tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
        return True
    if os.path.isfile(target):
        _mount(libc, "/dev/null", target, None, MS_BIND)
        return True
    return False


def _build_view(libc, cfg: dict, flags: int, report: dict) -> None:
    """A new root file system holding only what the child needs (see ``_boot``)."""
    new_root = cfg["view_root"]
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back out
    _mount(libc, "tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in PRIVATE_TMP[:2]:  # first, so that folders exposed below /tmp stay visible
        os.makedirs(new_root + path, exist_ok=True)
        _mount(libc, "tmpfs", new_root + path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmp_bytes']},mode=1777")
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
    # Python, the venv, the grader package's files: first those outside every secret, then the
    # secrets' covers, then what lies inside a secret (the venv and the grader package of a course
    # installed under /opt, whose checkout is covered as a whole) on top of its cover.
    inside_secret = [(s, t) for s, t in cfg["expose"] if any(_within(t, h) for h in cfg["hide"])]
    for source, target in cfg["expose"]:
        if (source, target) not in inside_secret and os.path.exists(source):
            if not any(_within(target, d) for d in exposed):
                _bind(libc, source, new_root + target, read_only=True)
                exposed.append(target)
    covered = [path for path in cfg["hide"] if _cover(libc, new_root + path)]
    for source, target in inside_secret:
        if os.path.exists(source) and (
            any(_within(target, c) for c in covered) or not any(_within(target, d) for d in exposed)
        ):
            _bind(libc, source, new_root + target, read_only=True)
            exposed.append(target)
    for path in covered:  # read-only now that what goes inside is in place
        if os.path.isdir(new_root + path):
            _mount(libc, None, new_root + path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for path in ("/sys", "/dev"):  # devices must stay writable (/dev/null, the GPU)
        if os.path.isdir(path):
            _bind(libc, path, new_root + path, read_only=path == "/sys")
    if os.path.isdir(new_root + "/dev/shm"):
        _mount(
            libc, "tmpfs", new_root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmp_bytes']},mode=1777"
        )
    _bind(libc, cfg["workdir"], new_root + cfg["workdir"], read_only=False)
    if cfg.get("shared"):  # the folder the children of one grading share (Triton's cache)
        _bind(libc, cfg["shared"], new_root + cfg["shared"], read_only=False)
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
    report["own_memory_covered"] = _cover_own_memory(libc)
    try:
        _mount(libc, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError:
        pass  # the view's own root stays writable by root only; the child is not root
    report["filesystem"] = (
        f"private view ({how}): read-only system folders, Python and the grader "
        "package; its own working folder; empty /tmp"
    )
    report["hidden_paths"] = covered


def _cover_own_memory(libc) -> list[str]:
    """Bind /dev/null over this process's own memory file (``/proc/<pid>/mem``, which
    /proc/self/mem leads to, and its main thread's, which /proc/thread-self/mem leads to): through
    it, code in the process could read and rewrite any of its memory, the grader's included. The
    PID stays the same across exec, so the cover holds for the child. Returns the paths covered."""
    pid = os.getpid()
    covered = []
    for path in (f"/proc/{pid}/mem", f"/proc/{pid}/task/{pid}/mem"):
        try:
            _mount(libc, "/dev/null", path, None, MS_BIND)
            covered.append(path)
        except OSError:
            pass
    return covered


def _own_memory_report(covered: list[str], report: dict) -> None:
    """What keeps the child out of its own memory file, for the record."""
    parts = [f"/dev/null over {' and '.join(covered)}"] if covered else []
    if os.getuid() != 0:
        parts.append(
            "made non-dumpable as the child starts, before kernel.py is imported, so that "
            "no thread's /proc/<pid>/mem opens for it"
        )
    else:
        parts.append("not made unopenable otherwise: the child runs as root, which non-dumpable does not stop")
    report["own_memory"] = "; ".join(parts)


def forbid_own_memory() -> bool:
    """Make this process non-dumpable: its /proc/<pid>/... files then belong to root, so that a
    process of an ordinary uid can no longer open its own memory (/proc/self/mem, any thread's
    mem), nor read its environment. Exec makes a process dumpable again, so the grader's child
    calls this first thing after it starts (``grader.sandbox.child.main``). Returns whether it
    took effect."""
    try:
        return _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


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
    report["limits"] = {
        "cpu_seconds": limits["cpu_seconds"],
        "memory_bytes": limits["memory_bytes"],
        "address_space_bytes": limits.get("address_space_bytes") or None,
        "file_bytes": limits["file_bytes"],
        "open_files": limits["open_files"],
    }


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
    program = [
        (ld, 0, 0, 4),
        (jeq, 1, 0, audit_arch),
        (ret, 0, 0, kill),  # a foreign ABI: stop
        (ld, 0, 0, 0),
        (jge, refuse_at - 5, 0, 0x40000000),
    ]  # x32 calls on x86_64
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
    report["syscall_filter"] = (
        f"{len(numbers)} system calls refused (ptrace, mount, unshare, bpf, perf_event_open, ...)"
    )


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
    """Lock this process in, then exec ``cfg["argv"]``. Where the platform permits, it

    - unshares the mount, PID, network, IPC and UTS namespaces (through a user namespace when the
      grader does not run as root): the child has no network, and killing its first process kills
      every process it started, even ones that left its process group;
    - builds a new root file system for it: read-only system folders (/usr, /etc, ...), the Python
      installation, the ``grader`` package, fresh /tmp, /var/tmp and /dev/shm, and its private
      working folder holding only the submission's kernel.py and its inputs. Solutions, results,
      other submissions and home folders are not in it (and are covered with empty folders if they
      lie inside an exposed one);
    - sets resource limits: CPU seconds, host memory (RLIMIT_DATA; RLIMIT_AS too on the CPU, never
      on CUDA, which reserves a huge address space), file size, processes, open files, no core
      dumps;
    - drops root for a dedicated unprivileged uid, one per worker slot. Linux does not apply
      RLIMIT_NPROC to root at all, so without this step a fork bomb would be limited by nothing;
    - covers the child's own memory file with /dev/null (in its view), which with the child making
      itself non-dumpable (``forbid_own_memory``) keeps it from rewriting its own memory, the
      grader's monitor included, through /proc/self/mem;
    - installs the seccomp filter, last, since the steps above need the calls it refuses.
    """
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
        _own_memory_report(report.pop("own_memory_covered", []), report)
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


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--boot":
    _boot(json.loads(sys.argv[2]))
