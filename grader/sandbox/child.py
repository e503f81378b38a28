"""The grader's child process: import one submission's kernel.py, then call its API on each
trial's inputs as the parent hands them over.

``grader.sandbox.isolation`` starts it (never by hand) with two inherited pipes whose numbers end
its argv. The parent writes orders on the first, one JSON line each: the set-up, then one line per
trial (``{"trial": 3}``) or for the timed loop, then end of file. The child answers on the second,
one JSON line per event carrying the set-up's token. stdin, stdout and stderr belong to the
learner's code: nothing printed there is ever read as a result.

Order of events, and why: the child imports torch, Triton and the grader's monitor, then the
learner's file, and reports ``loaded``; only then does the parent write the first trial's inputs
(``trial-<n>.in``, in ``grader.sandbox.wire``'s format) into the working folder. The child reads
and deletes that file before calling the API, so the learner's code never finds any input but the
current call's: nothing can be computed at import time, and a child that runs public cases never
holds a hidden case's inputs (hidden cases run in children of their own). After each call the
outputs and the inputs as they are afterwards go to ``trial-<n>.out``, with a ``done`` event
carrying the monitor's report.

It judges nothing. The learner's code runs in this process and could have patched any of it, so
the parent treats every event and file as a claim: it reads files with size limits, compares the
outputs with its own reference, and re-checks the inputs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

# What the child runs as, after ``python -I -B``: the repository root goes first on sys.path so
# that the grader package is this checkout's.
# The clock is read first so that the child can report how long its imports took (--profile).
BOOTSTRAP = (
    "import sys, time; booted = time.monotonic(); sys.path.insert(0, sys.argv[1]); "
    "from grader.sandbox.child import main; sys.exit(main(sys.argv[2:], booted))"
)


def command(repo_root: str | Path) -> list[str]:
    """The argv tail for ``grader.sandbox.isolation.Sandbox.start``."""
    return ["-c", BOOTSTRAP, str(repo_root)]


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
            data = data[self._write(self.fd, data) :]


def input_name(trial: int) -> str:
    return f"trial-{trial}.in"


def output_name(trial: int) -> str:
    return f"trial-{trial}.out"


TIMING_INPUTS, TIMED_OUTPUTS = "timing.in", "timed.out"


class Orders:
    """The parent's orders: JSON lines on the request pipe; None once the parent closes it."""

    def __init__(self, fd: int):
        self.fd, self.buffer = fd, b""

    def next(self) -> dict | None:
        while b"\n" not in self.buffer:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def _in_workdir(name: str) -> str:
    # The folder the child started in, whatever os.chdir the learner's code does later.
    return os.path.join(_WORKDIR, name)


def _take_file(name: str) -> bytearray:
    """Read and delete a file the parent wrote, before any learner code runs for it (into a
    bytearray: ``wire.parse`` uses its bytes where they lie)."""
    with open(_in_workdir(name), "rb") as handle:
        data = bytearray(os.fstat(handle.fileno()).st_size)
        handle.readinto(data)
    os.unlink(_in_workdir(name))
    return data


def _put_file(name: str, data: bytes) -> None:
    with open(_in_workdir(name), "wb") as handle:
        handle.write(data)


_WORKDIR = os.getcwd()


class CompileClock:
    """Seconds Triton spent compiling, and autotuning (which includes compiling its configs),
    from its listeners where the installed Triton has them (``triton.knobs``); for
    ``--profile`` only, never for a grade."""

    def __init__(self):
        self.compiling = self.autotuning = 0.0
        try:
            from triton import knobs

            knobs.compilation.listener = self._compiled
            knobs.autotuning.listener = self._autotuned
        except (ImportError, AttributeError):
            pass

    def _compiled(self, *, times=None, cache_hit=False, **_):
        if not cache_hit and times is not None:
            self.compiling += getattr(times, "total", 0) / 1e6  # microseconds

    def _autotuned(self, *, duration=None, cache_hit=False, **_):
        if not cache_hit and isinstance(duration, (int, float)):
            self.autotuning += duration

    def take(self) -> dict:
        """The seconds since the last call, as the ``done`` event's fields."""
        taken = {"compile_seconds": round(self.compiling, 4), "autotune_seconds": round(self.autotuning, 4)}
        self.compiling = self.autotuning = 0.0
        return taken


class CompileGate:
    """On a GPU shared with timings (``grader.grade.leases``): each compile is announced to the
    parent once this process has nothing left running on the GPU, and the kernel it compiled
    launches only once the parent says go. A timing then need not wait for a call that is
    compiling (CPU work): the parent freezes the child instead while the timing has the GPU."""

    def __init__(self, channel, orders: Orders, synchronize):
        self.channel, self.orders, self.synchronize = channel, orders, synchronize
        try:
            from triton import knobs

            knobs.runtime.jit_cache_hook = self._compiling
            knobs.runtime.jit_post_compile_hook = self._compiled
        except (ImportError, AttributeError):  # a Triton without these hooks: calls are waited for whole
            pass

    def _compiling(self, **_) -> bool:
        self.synchronize()
        self.channel.send("compiling")
        return False  # compile it (True would skip the compile)

    def _compiled(self, **_) -> None:
        self.channel.send("compiled")
        self.orders.next()  # the parent's go (or the end of its orders, when it has stopped)


def main(argv: list[str], booted: float | None = None) -> int:
    from grader.sandbox.boot import forbid_own_memory

    forbid_own_memory()  # first: no /proc/<pid>/mem of this process opens from here on
    request_fd, reply_fd = int(argv[-2]), int(argv[-1])
    orders = Orders(request_fd)
    request = orders.next()
    channel = Channel(reply_fd, request["token"])

    import torch

    from grader.core import device
    from grader.core.catalog import find_module
    from grader.core.checks import KernelCallError, call_api, short_error
    from grader.core.evidence import ALLOWED_OPS, KernelTrace, canary, shared_monitor
    from grader.core.loading import LoadError, load_kernel
    from grader.core.memcheck import BoundsGuard
    from grader.core.protocols import as_passed, calling, from_order, tensors_in, timed
    from grader.sandbox import wire

    monitor = shared_monitor()
    canary_seen = canary(monitor)  # bound now: checks after each call that the monitor still sees
    allowed_ops = ALLOWED_OPS | frozenset(request.get("allowed_ops", ()))
    # Taken before the learner's file is imported, so that patching them later changes nothing here.
    tools = _Tools(
        save=wire.dump_spans,
        load=wire.parse,
        clock=time.perf_counter,
        plain_tensor=torch.Tensor,
        synchronize=torch.cuda.synchronize,
        event=torch.cuda.Event,
        take=_take_file,
        put=_put_file,
        trace=KernelTrace,
    )
    cuda = device.is_cuda()
    # Under the interpreter a kernel's addresses are host addresses: from before the learner's
    # import on, every access outside the launch's tensors is refused.
    guard = None if cuda else BoundsGuard().install()
    if cuda and not request.get("autotune", True):
        device.run_first_autotune_config()  # before the learner's file applies the decorator
    # A timed child tunes twice: once warming up beside other processes, again with the GPU alone.
    retune = device.retuning() if cuda and request.get("autotune", True) else (lambda: None)
    channel.send("started", mode=device.mode(), imports_seconds=time.monotonic() - (booted or time.monotonic()))
    if cuda and request.get("gate_start"):
        # Nothing so far has touched the GPU (importing is CPU work, done while timings ran):
        # from here on it is used, once the parent says go (grader.grade.leases).
        orders.next()
    memory_cap = None
    if cuda and request.get("gpu_memory_fraction"):
        torch.cuda.set_per_process_memory_fraction(request["gpu_memory_fraction"])
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        memory_cap = request["gpu_memory_fraction"] * total
    module = find_module(request["module"])
    api = request["api"]
    compile_clock = CompileClock()
    if cuda and request.get("gate_compiles"):
        CompileGate(channel, orders, torch.cuda.synchronize)

    try:
        kernel = load_kernel(module, Path(request["kernel"]).resolve())
    except LoadError as error:
        fault = guard.take_fault() if guard is not None else None
        channel.send("load_error", message=_stopped_at_import(fault) if fault else str(error))
        return 0
    except BaseException as error:  # e.g. KeyboardInterrupt raised by the file itself
        fault = guard.take_fault() if guard is not None else None
        channel.send(
            "load_error",
            message=_stopped_at_import(fault)
            if fault
            else f"kernel.py raised {type(error).__name__} while being imported: {short_error(error, 3)}",
        )
        return 0
    fault = guard.take_fault() if guard is not None else None
    if fault is not None:  # refused, even if the file caught the error
        channel.send("load_error", message=_stopped_at_import(fault))
        return 0
    raw = getattr(kernel.namespace, api)  # the module's main function, the one that is timed
    # Every function the module's cases call; the parent names one per call, and how the case
    # calls it (grader.core.protocols), watched as a whole so that a backward pass is watched too.
    functions = {name: getattr(kernel.namespace, name) for name in {api, *(request.get("apis") or ())}}
    if cuda:  # GPU work queued at import ends before the parent may freeze this process or count it off the GPU
        try:
            tools.synchronize()
        except BaseException as error:
            channel.send(
                "load_error",
                message=f"GPU work that kernel.py started while being imported failed: {short_error(error, 3)}",
            )
            return 0
    channel.send("loaded")

    on = device.torch_device()
    timing_sets = None
    while (order := orders.next()) is not None:
        if "trial" in order:
            trial = int(order["trial"])
            called = order["api"] if order.get("api") in functions else api
            protocol, mutates = from_order(order.get("call"))
            watched = monitor.watching(calling(protocol, functions[called], called), allowed_ops)
            value = tools.load(tools.take(input_name(trial)), 1 << 40, on)
            args, kwargs = tuple(value["args"]), value["kwargs"]
            passed = as_passed(args, kwargs)  # the caller's tensors, whatever the call puts in its lists
            started = tools.clock()
            error, outputs = None, ()
            trace = tools.trace() if cuda else None
            try:
                target = watched if trace is None else _traced(watched, trace)
                if guard is not None:  # the call's tensors reachable; its stores recorded
                    target = guard.call(target, args, kwargs)
                outputs = call_api(target, args, kwargs, called, mutates)
            except KernelCallError as failure:
                error = str(failure)
            except BaseException as failure:  # sys.exit() inside the call, and the like
                error = f"{called}() raised {type(failure).__name__}: {short_error(failure, 3)}"
            seconds = tools.clock() - started
            observed = monitor.report()
            if trace is not None:
                observed.update(
                    kernels=trace.names, kernel_counts=trace.counts, kernel_us=trace.times_us, busy_us=trace.busy_us
                )
            if guard is not None:
                fault = guard.take_fault()
                if fault is not None:  # refused, even if the learner's code caught the error
                    error = f"The grader stopped {called}(): {fault}"
                try:
                    observed["unwritten_by_kernel"] = guard.unwritten(outputs)
                except Exception:  # a malformed output: the parent's comparison says what is wrong
                    observed["unwritten_by_kernel"] = []
            observed["canary"] = canary_seen()  # after the report, which it replaces in the monitor
            kept = [out if type(out) is tools.plain_tensor else None for out in outputs]
            try:
                tools.put(
                    output_name(trial),
                    tools.save(
                        {
                            "outputs": kept,
                            "args": list(passed[0]),
                            "kwargs": passed[1],
                            "after": tensors_in((args, kwargs)),
                        }
                    ),
                )
            except BaseException as failure:
                error = error or f"the grader could not save what {called}() returned: {short_error(failure, 2)}"
            fatal = None
            if cuda and error:
                if "out of memory" in error.lower():
                    fatal = "GPU memory ran out"
                    if memory_cap:
                        error += (
                            f"\nThe grader lets this process allocate {memory_cap / (1 << 30):.1f} GiB of GPU "
                            "memory, room to spare for what the reference solution needs here."
                        )
                try:
                    tools.synchronize()
                except BaseException:
                    fatal = "the CUDA context was lost (an illegal memory access, or a crashed kernel)"
            channel.send(
                "done",
                trial=trial,
                error=error,
                seconds=seconds,
                **observed,
                **compile_clock.take(),
                returned=[type(out).__name__ for out in outputs],
                devices=[out.device.type if type(out) is tools.plain_tensor else None for out in outputs],
            )
            del outputs, kept, args, kwargs, value, passed
            if fatal:  # the rest of the trials need a fresh process
                channel.send("fatal", reason=fatal)
                return 0
        elif "timing_inputs" in order and cuda:  # handed over before the GPU is this child's alone
            timing_sets = _timing_sets(tools, on)
            channel.send("timing_inputs_loaded")
        elif "warm_up" in order and cuda:  # still sharing the GPU: compile (and tune) beforehand
            _warm_up(channel, timed(from_order(order.get("call"))[0], raw, api), tools, timing_sets)
        elif "timing" in order and cuda:
            # Not under the monitor, whose Python hooks would slow the learner's calls and not the
            # reference's; under the GPU's kernel trace instead, which costs both the same, and
            # every set's last outputs saved for the parent (grader.grade.timed_work).
            if timing_sets is None:
                channel.send("timing_error", error="the timing inputs were not handed over first")
            else:
                if order.get("retune"):
                    retune()
                _timed_loop(
                    channel,
                    timed(from_order(order.get("call"))[0], raw, api),
                    int(order["timing"]),
                    tools,
                    timing_sets,
                    compile_clock,
                    bool(order.get("save")),
                    int(order.get("windows", 1)),
                )
        else:
            break
    channel.send("finished")
    return 0


def _stopped_at_import(fault) -> str:
    return (
        f"kernel.py launched a kernel while being imported, and the grader stopped it: {fault} "
        "Launch kernels only inside your functions, on the tensors they are given."
    )


def _traced(fn, trace):
    """``fn`` with ``trace`` around the learner's call alone: the harness's own copies and checks
    in ``call_api`` stay out of the kernel list."""

    def call(*args, **kwargs):
        with trace:
            return fn(*args, **kwargs)

    return call


class _Tools:
    """The functions the harness uses after the learner's import, bound beforehand."""

    def __init__(self, **functions):
        self.__dict__.update(functions)


def _timing_sets(tools: _Tools, on) -> list:
    """The timing inputs the parent handed over: [(args, kwargs)] on the device."""
    sets = tools.load(tools.take(TIMING_INPUTS), 1 << 40, on)
    return [(tuple(entry["args"]), entry["kwargs"]) for entry in sets]


def _warm_up(channel, fn, tools: _Tools, sets: list | None) -> None:
    """One call on the first timing inputs, before the GPU is this child's alone, so that its
    kernels compile then and not in the timed child's exclusive time. Its outcome grades nothing:
    a call that fails here fails again when timed, and says so there."""
    from grader.core.checks import short_error

    try:
        if sets is None:
            raise RuntimeError("the timing inputs were not handed over first")
        args, kwargs = sets[0]
        fn(*args, **kwargs)
        tools.synchronize()
        channel.send("warmed_up")
    except BaseException as failure:
        channel.send("warmed_up", error=f"{type(failure).__name__}: {short_error(failure, 3)}")


def _timed_loop(
    channel, fn, reps: int, tools: _Tools, sets: list, compile_clock: CompileClock, save: bool, windows: int = 1
) -> None:
    """Call ``fn`` ``reps`` times on the parent's inputs between two messages the parent times,
    in each of ``windows`` windows one after another (the parent keeps the fastest).

    Each closing message follows a device-wide synchronize taken before the learner's import, so
    work left running (lazy, or on a side stream) is inside the timed window. The GPU's kernel
    trace covers each window's calls: which kernels ran, how often, and for how long, so that the
    parent can hold every window to the same evidence as a judged call. With ``save``, the
    outputs of the last window's last call on each input set are saved afterwards for the parent
    to check. The events are only a cross-check for the parent."""
    from grader.core.checks import as_tuple, short_error

    try:
        compile_clock.take()
        for args, kwargs in sets:  # warm up: tune, and compile what the warm-up left
            fn(*args, **kwargs)
        tools.synchronize()
        last = {}  # input set -> the outputs of its last call
        for window in range(windows):
            start, end = tools.event(enable_timing=True), tools.event(enable_timing=True)
            keep = save and window == windows - 1
            trace = tools.trace()
            with trace:
                channel.send("timing_start", **compile_clock.take())
                start.record()
                for i in range(reps):
                    args, kwargs = sets[i % len(sets)]
                    outputs = as_tuple(fn(*args, **kwargs))
                    if keep and i >= reps - len(sets):
                        last[i % len(sets)] = outputs
                end.record()
                tools.synchronize()
                channel.send("timing_end", event_ms=start.elapsed_time(end))
            channel.send("timing_kernels", counts=trace.counts, times_us=trace.times_us, busy_us=trace.busy_us)
        if save:
            kept = [[out if type(out) is tools.plain_tensor else None for out in last[index]] for index in sorted(last)]
            tools.put(TIMED_OUTPUTS, tools.save({"outputs": kept, "sets": sorted(last)}))
            channel.send("timing_saved")
    except BaseException as failure:
        channel.send("timing_error", error=f"{type(failure).__name__}: {short_error(failure, 3)}")
