"""The grader's child process: import one submission's kernel.py and call its API on given inputs.

``grader.sandbox.isolation`` starts it (never by hand) with two inherited pipes whose numbers end its argv:
the parent writes one JSON request on the first and closes it; the child answers on the second,
one JSON line per event, each carrying the request's token. stdin, stdout and stderr belong to the
learner's code: nothing printed there is ever read as a result.

The child sets everything up before the learner's file is imported: the request, the inputs
(``torch.load(weights_only=True)``), references to the functions it reports with, and the monitor
that counts Triton launches and logs the PyTorch operators run during each call. Then, per trial,
it calls the API through ``grader.checks.call_api`` (poisoned outputs, mutation and aliasing
checks), saves the outputs and the inputs as they are afterwards with ``torch.save``, and reports.
It judges nothing: the parent compares the outputs with its own reference, re-checks the inputs,
and treats everything reported here as information, since the learner's code ran in this process
and could have patched any of it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

# What the child runs as, after ``python -I -B``: the repository root goes first on sys.path so
# that the grader package is this checkout's.
BOOTSTRAP = "import sys; sys.path.insert(0, sys.argv[1]); from grader.sandbox.child import main; sys.exit(main(sys.argv[2:]))"


def command(repo_root: str | Path) -> list[str]:
    """The argv tail for ``grader.sandbox.isolation.Sandbox.start``."""
    return ["-c", BOOTSTRAP, str(repo_root)]


# PyTorch operators that do not compute anything from the inputs' values: allocating, filling,
# viewing, reshaping, copying and converting tensors, reading metadata or a scalar. Any other
# operator run during the call (add, mul, mm, softmax, sum, exp, ...) means that PyTorch, not a
# Triton kernel, did the work.
ALLOWED_OPS = frozenset("""
    empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones
    ones_like new_ones full full_like new_full arange scalar_tensor lift_fresh lift_fresh_copy
    fill fill_ zero zero_ copy copy_ clone _to_copy to contiguous detach detach_ alias
    _copy_from _copy_from_and_resize resize_ set_ cat stack constant_pad_nd
    view _unsafe_view reshape _reshape_alias as_strided as_strided_ t t_ transpose transpose_
    permute expand expand_as unsqueeze unsqueeze_ squeeze squeeze_ select slice narrow split
    split_with_sizes unsafe_split chunk unbind flatten unflatten movedim view_as diagonal unfold
    view_as_real view_as_complex _local_scalar_dense is_nonzero is_same_size record_stream
    sym_size sym_stride sym_numel sym_storage_offset _has_compatible_shallow_copy_type
    pin_memory _pin_memory is_pinned
""".split())

# Tensor methods that hand the values to NumPy or Python, where they could be computed unseen.
ESCAPES = frozenset({"numpy", "tolist", "__array__"})


class Monitor:
    """Counts Triton kernel launches and logs PyTorch operators while a call runs.

    Triton's interpreter (3.6-3.9) does not fire ``knobs.runtime.launch_enter_hook``, so launches
    are counted by wrapping the launch entry points (``InterpretedFunction.run`` under the
    interpreter, ``JITFunction.run`` natively); the launch hook, where Triton has one, also
    catches compiled kernels launched directly. Operators run inside a launch (the interpreter
    copies arguments; the autotuner benchmarks) are Triton's, not the learner's, and not logged.
    """

    def __init__(self):
        import torch
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        self.launches = 0
        self.hook_launches = 0
        self.inside_triton = 0
        self.active = False
        self.ops: dict[str, int] = {}
        self.escapes: set[str] = set()
        monitor = self

        class OpLog(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if monitor.active and not monitor.inside_triton:
                    name = func.overloadpacket.__name__
                    if name not in ALLOWED_OPS:
                        monitor.ops[name] = monitor.ops.get(name, 0) + 1
                return func(*args, **(kwargs or {}))

        class EscapeLog(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                name = getattr(func, "__name__", "")
                if name in ESCAPES and monitor.active and not monitor.inside_triton:
                    monitor.escapes.add(name)
                return func(*args, **(kwargs or {}))

        self._modes = (OpLog, EscapeLog)
        self._install_launch_counters()
        self._torch = torch

    def _install_launch_counters(self) -> None:
        import triton

        entry_points = []
        try:
            from triton.runtime.interpreter import InterpretedFunction
            entry_points.append((InterpretedFunction, True))
        except ImportError:
            pass
        try:
            from triton.runtime.jit import JITFunction
            entry_points.append((JITFunction, True))
        except ImportError:
            pass
        try:
            from triton.runtime.autotuner import Autotuner, Heuristics
            entry_points += [(Autotuner, False), (Heuristics, False)]
        except ImportError:
            pass
        for cls, counts in entry_points:
            if "run" in vars(cls):
                setattr(cls, "run", self._wrap_run(vars(cls)["run"], counts))

        runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
        chain = getattr(runtime, "launch_enter_hook", None)
        if hasattr(chain, "add"):  # Triton >= 3.5: a chain of hooks
            chain.add(self._launch_hook)
        elif runtime is not None and chain is None:
            runtime.launch_enter_hook = self._launch_hook

    def _wrap_run(self, original, counts: bool):
        monitor = self

        def run(self, *args, **kwargs):
            if counts and not kwargs.get("warmup", False) and monitor.active:
                monitor.launches += 1
            monitor.inside_triton += 1
            try:
                return original(self, *args, **kwargs)
            finally:
                monitor.inside_triton -= 1

        run.__wrapped__ = original
        return run

    def _launch_hook(self, *args, **kwargs):
        if self.active:
            self.hook_launches += 1

    def watching(self, fn):
        """``fn`` wrapped so that its call is counted and logged."""
        monitor, (op_log, escape_log) = self, self._modes

        def watched(*args, **kwargs):
            monitor.launches = monitor.hook_launches = 0
            monitor.ops, monitor.escapes = {}, set()
            monitor.active = True
            try:
                with escape_log(), op_log():
                    return fn(*args, **kwargs)
            finally:
                monitor.active = False

        return watched

    def report(self) -> dict:
        return {"launches": max(self.launches, self.hook_launches),
                "ops": dict(sorted(self.ops.items())), "escapes": sorted(self.escapes)}


class Channel:
    """The reply pipe. Only this process may write on it: a copy made by the learner's os.fork()
    leaves quietly the first time it reaches the grader's code."""

    def __init__(self, fd: int, token: str):
        self.fd, self.token, self.pid = fd, token, os.getpid()
        self._dumps, self._write, self._getpid, self._exit = json.dumps, os.write, os.getpid, os._exit

    def send(self, event: str, **fields) -> None:
        if self._getpid() != self.pid:
            self._exit(0)
        data = (self._dumps({"t": self.token, "event": event, **fields}) + "\n").encode()
        while data:
            data = data[self._write(self.fd, data):]


def _read_request(fd: int) -> dict:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    os.close(fd)
    return json.loads(b"".join(chunks))


def main(argv: list[str]) -> int:
    request_fd, reply_fd = int(argv[-2]), int(argv[-1])
    request = _read_request(request_fd)
    channel = Channel(reply_fd, request["token"])

    import torch

    from grader import device
    from grader.catalog import find_module
    from grader.checks import KernelCallError, call_api, short_error
    from grader.loading import LoadError, load_kernel

    monitor = Monitor()
    # Taken before the learner's file is imported, so that patching them later changes nothing here.
    save, clock, plain_tensor = torch.save, time.perf_counter, torch.Tensor
    synchronize, event = torch.cuda.synchronize, torch.cuda.Event
    cuda = device.is_cuda()
    if cuda and request.get("gpu_memory_fraction"):
        torch.cuda.set_per_process_memory_fraction(request["gpu_memory_fraction"])
    inputs = torch.load(request["inputs"], weights_only=True, map_location=device.torch_device()) \
        if request["trials"] else {}
    module = find_module(request["module"])
    api = request["api"]
    channel.send("started", mode=device.mode())

    try:
        kernel = load_kernel(module, Path(request["kernel"]).resolve())
    except LoadError as error:
        channel.send("load_error", message=str(error))
        return 0
    except BaseException as error:  # e.g. KeyboardInterrupt raised by the file itself
        channel.send("load_error", message=f"kernel.py raised {type(error).__name__} while being imported: "
                                           f"{short_error(error, 3)}")
        return 0
    fn = getattr(kernel.namespace, api)
    channel.send("loaded")

    for trial in request["trials"]:
        channel.send("start", trial=trial)
        args, kwargs = inputs[str(trial)]["args"], inputs[str(trial)]["kwargs"]
        started = clock()
        error, outputs = None, ()
        try:
            outputs = call_api(monitor.watching(fn), args, kwargs, api)
        except KernelCallError as failure:
            error = str(failure)
        except BaseException as failure:  # sys.exit() inside the call, and the like
            error = f"{api}() raised {type(failure).__name__}: {short_error(failure, 3)}"
        seconds = clock() - started
        observed = monitor.report()
        kept = [out if type(out) is plain_tensor else None for out in outputs]
        try:
            save({"outputs": kept, "args": list(args), "kwargs": dict(kwargs)}, f"outputs-{trial}.pt")
        except BaseException as failure:
            error = error or f"the grader could not save what {api}() returned: {short_error(failure, 2)}"
        fatal = None
        if cuda and error:
            if "out of memory" in error.lower():
                fatal = "GPU memory ran out"
            try:
                torch.cuda.synchronize()
            except BaseException:
                fatal = "the CUDA context was lost (an illegal memory access, or a crashed kernel)"
        channel.send("done", trial=trial, error=error, seconds=seconds, **observed,
                     returned=[type(out).__name__ for out in outputs],
                     devices=[out.device.type if type(out) is plain_tensor else None for out in outputs])
        del outputs, kept
        if fatal:  # the rest of the trials need a fresh process
            channel.send("fatal", reason=fatal)
            return 0
    if request.get("timing") and cuda:
        _timed_loop(channel, fn, request["timing"], torch, save, synchronize, event, plain_tensor)
    channel.send("finished")
    return 0


def _timed_loop(channel, fn, timing: dict, torch, save, synchronize, event, plain_tensor) -> None:
    """Call ``fn`` ``reps`` times on the parent's inputs between two messages the parent times.

    The closing message follows a device-wide synchronize taken before the learner's import, so
    work left running (lazy, or on a side stream) is inside the timed window; the last outputs are
    saved after it for the parent to check. The events are only a cross-check for the parent."""
    from grader.checks import as_tuple, short_error

    sets = torch.load(timing["inputs"], weights_only=True, map_location="cuda")
    sets = [(tuple(entry["args"]), entry["kwargs"]) for entry in sets]
    try:
        for args, kwargs in sets:  # compile and warm up
            fn(*args, **kwargs)
        synchronize()
        start, end = event(enable_timing=True), event(enable_timing=True)
        channel.send("timing_start")
        start.record()
        for i in range(timing["reps"]):
            args, kwargs = sets[i % len(sets)]
            outputs = as_tuple(fn(*args, **kwargs))
        end.record()
        synchronize()
        channel.send("timing_end", event_ms=start.elapsed_time(end))
        kept = [out if type(out) is plain_tensor else None for out in outputs]
        save({"outputs": kept, "set": (timing["reps"] - 1) % len(sets)}, "timed-outputs.pt")
        channel.send("timing_saved")
    except BaseException as failure:
        channel.send("timing_error", error=f"{type(failure).__name__}: {short_error(failure, 3)}")
