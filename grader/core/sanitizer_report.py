"""compute-sanitizer's reports, read: the text its tools print (memcheck, initcheck, racecheck)
turned into findings, each with a plain sentence, like the interpreter's memory checker
(``grader.core.memcheck``) gives on a CPU.

``parse_report`` reads the text compute-sanitizer prints (its line formats changed over the
years; both the ``kernel+0x1b0 in file:line`` and the older ``0x1b0 in file:line:kernel`` forms
are read) and merges the reports of one access made by many threads into one finding;
``reported_errors`` and ``reported_warnings`` read its summary lines. ``parse_gsan`` reads what
Triton's GSan (3.9 and later) prints: one failed device assertion per thread that found a race on
global memory. Running the tools is
``grader.learn.sanitizer``'s job (for learners) and ``grader.authoring.sanitizers``'s (the
memory-bug corpus).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

# A report line: a run of '=' and one space, then the text. A record's first line has its text
# right after that space; the lines that continue it are indented further.
_LINE = re.compile(r"^\s*={3,}(?P<gap> +)(?P<text>\S.*?)\s*$")
_INVALID = re.compile(r"^Invalid (?P<space>__\w+__) (?P<access>\w+|\?) of size (?P<size>\d+)(?: bytes?)?$")
_UNINITIALISED = re.compile(
    r"^Uninitiali[sz]ed (?P<space>__\w+__) memory (?P<access>\w+) of size "
    r"(?P<size>\d+)(?: bytes?)?$"
)
_HOST_UNINITIALISED = re.compile(
    r"^Host API memory access error at host access to (?P<address>0x[0-9a-fA-F]+) "
    r"of size (?P<size>\d+) bytes?$"
)
_RACE = re.compile(
    r"^(?P<severity>Error|Warning|ERROR|WARN\w*): Race reported between (?P<first>Read|Write) "
    r"access at (?P<where>.+?)(?: \[(?P<hazards>\d+) hazards?\])?$"
)
_OLD_HAZARD = re.compile(
    r"^(?P<severity>ERROR|WARN|INFO)\S*: Potential (?P<hazard>\w+) hazard detected at "
    r"__shared__ (?P<address>0x[0-9a-fA-F]+) in block \((?P<block>[\d, ]+)\)"
)
_API_ERROR = re.compile(
    r'^Program hit (?P<error>\w+) \(error (?P<code>\d+)\) due to "(?P<why>[^"]*)" on CUDA '
    r"API call to (?P<api>\w+)"
)
_HARDWARE = re.compile(r"^(?:Warp|Lane|Device) [A-Z][\w -]+$")
_ERROR_SUMMARY = re.compile(r"^ERROR SUMMARY: (?P<count>[\d,]+) errors?")
_RACE_SUMMARY = re.compile(
    r"^RACECHECK SUMMARY: (?P<count>[\d,]+) hazards? displayed \((?P<errors>[\d,]+) errors?"
    r"(?:, (?P<warnings>[\d,]+) warnings?)?"
)

_AT = re.compile(r"^at (?P<where>.+)$")
_THREAD = re.compile(r"^by thread \((?P<thread>[\d, ]+)\) in block \((?P<block>[\d, ]+)\)")
_ADDRESS = re.compile(
    r"^(?:Address|Access to|Access at) (?P<address>0x[0-9a-fA-F]+)"
    r"(?: is (?P<state>out of bounds|misaligned))?"
)
_NEAREST = re.compile(
    r"^and is (?:(?P<distance>[\d,]+) bytes (?P<relation>after|before)|(?P<inside>inside)) "
    r"the nearest allocation at (?P<allocation>0x[0-9a-fA-F]+) of size "
    r"(?P<allocation_size>[\d,]+) bytes?"
)
_RACE_OTHER = re.compile(r"^and (?P<second>Read|Write) access at (?P<where>.+?)(?: \[(?P<hazards>\d+) hazards?\])?$")
_THREAD_AT = re.compile(r"^(?P<access>Read|Write) Thread \((?P<thread>[\d, ]+)\) at (?P<where>.+)$")
_UNINITIALISED_AT = re.compile(r"^Uninitiali[sz]ed access at (?P<address>0x[0-9a-fA-F]+) on access by (?P<by>.+)$")
# Where a record points: "kernel+0x1b0 in file.py:31", "kernel+0x1b0", "0x1b0 in file.py:31:kernel", "0x1b0 in kernel"
_WHERE_NEW = re.compile(r"^(?P<kernel>.+?)\+0x[0-9a-fA-F]+(?: in (?P<file>.+?):(?P<line>\d+))?$")
_WHERE_OLD_LINE = re.compile(r"^0x[0-9a-fA-F]+ in (?P<file>[^:]+?):(?P<line>\d+):(?P<kernel>.+)$")
_WHERE_OLD = re.compile(r"^0x[0-9a-fA-F]+ in (?P<kernel>.+)$")

_SPACES = {"__global__": "global", "__shared__": "shared", "__local__": "local"}


@dataclass(frozen=True)
class SanitizerFinding:
    """One problem compute-sanitizer reported (the first of its kind at one place; ``count`` says
    how many reports it stands for: usually one per thread that made the access)."""

    tool: str
    kind: str  # "out-of-bounds", "misaligned", "uninitialised-read", "race", "hardware-exception",
    # "api-error", "global-race" (GSan)
    access: str = ""  # "read", "write", "atomic", ... as the report says
    space: str = ""  # "global", "shared" or "local" memory
    size: int | None = None  # bytes per access
    address: int | None = None
    kernel: str = ""
    file: str = ""
    line: int = 0
    block: tuple = ()  # the CUDA block: the Triton program (program_id along axes 0, 1, 2)
    thread: tuple = ()  # a thread of that block (a thread handles several of a Triton block's lanes)
    relation: str = ""  # where the address lies: "after", "before" or "inside" the nearest allocation
    distance: int | None = None  # bytes after or before the nearest allocation, as the report counts them
    allocation: int | None = None  # the nearest allocation's address and size
    allocation_size: int | None = None
    other: str = ""  # a race: the other access ("write at line 30 of kernel.py")
    hazards: int | None = None  # a race: how many hazards the report counted
    detail: str = ""  # an API error or a hardware exception, in the report's words
    count: int = 1
    reported: str = ""  # the record's first line, as the tool words it

    def __str__(self) -> str:
        return self.message

    @property
    def message(self) -> str:
        more = f" ({self.count - 1} more report(s) like it, from other threads or programs.)" if self.count > 1 else ""
        return _SENTENCES[self.kind](self) + more

    def _place(self) -> str:
        where = f"at line {self.line} of {Path(self.file).name}" if self.line else "at an unknown line"
        kernel = _short(self.kernel) if self.kernel else "an unknown kernel"
        text = f"{where} (kernel {kernel})"
        if self.block:
            text += f", program {self.block} (the CUDA block)"
        if self.thread:
            text += f", thread {self.thread}"
        return text

    def _head(self) -> str:
        size = f" of {self.size} bytes" if self.size is not None else ""
        space = f" in {self.space} memory" if self.space and self.space != "global" else ""
        return f"{self.access or 'access'}{size}{space} {self._place()}"


def _short(kernel: str, limit: int = 80) -> str:
    return kernel if len(kernel) <= limit else kernel[: limit - 3] + "..."


def _out_of_bounds(f: SanitizerFinding) -> str:
    if f.relation == "after":
        where = (
            f"out of bounds, past the end of the nearest allocation ({f.distance} byte(s) after it; that "
            f"allocation holds {f.allocation_size} bytes at {f.allocation:#x}): check the mask of this access"
        )
    elif f.relation == "before":
        where = (
            f"out of bounds, before the start of the nearest allocation ({f.distance} byte(s) before it; "
            f"that allocation holds {f.allocation_size} bytes at {f.allocation:#x}): check the offsets and "
            "the mask of this access"
        )
    elif f.relation == "inside":
        where = (
            f"out of bounds of what was allocated, though inside a block of {f.allocation_size} bytes that "
            "an allocator reserved: with PyTorch, set PYTORCH_NO_CUDA_MEMORY_CACHING=1 to see which tensor"
        )
    else:
        address = f" (address {f.address:#x})" if f.address is not None else ""
        where = f"out of bounds of every allocation{address}"
    return f"{f._head()}: {where}."


def _misaligned(f: SanitizerFinding) -> str:
    address = f"address {f.address:#x}" if f.address is not None else "the address"
    return (
        f"{f._head()}: {address} is misaligned, not a multiple of the access size, and the GPU stops "
        "with 'misaligned address'. Offsets are counted in elements of the pointer's type: check the "
        "pointer's dtype and how its offsets are computed."
    )


def _uninitialised(f: SanitizerFinding) -> str:
    if f.detail:  # a host API call copied it
        return (
            f"{f.detail} copied {f.size} bytes of device memory that nothing has written since it was "
            "allocated: fill the tensor first (torch.zeros, or a kernel's store)."
        )
    address = f" (address {f.address:#x})" if f.address is not None else ""
    return (
        f"{f._head()}: it reads global memory that nothing has written since it was allocated{address}, "
        "so its value is whatever the memory held before. Fill it first (torch.zeros, or a store) or "
        "do not read it."
    )


def _race(f: SanitizerFinding) -> str:
    hazards = f" ({f.hazards} hazards)" if f.hazards else ""
    other = f" and a {f.other}" if f.other else ""
    return (
        f"race in shared memory: a {f.access} {f._place()}{other}, by threads of one program with no "
        f"barrier between them{hazards}. racecheck looks at shared memory only; programs that overwrite "
        "each other in global memory show as results that change from run to run instead."
    )


def _hardware(f: SanitizerFinding) -> str:
    return (
        f"{f.detail} {f._place()}: the GPU stopped the kernel there. memcheck names the exact "
        "access when the fault is an out-of-bounds or misaligned one."
    )


# CUDA calls that Triton makes and that fail without a fault in a kernel, with what each failure
# means (what memcheck reported for the course's own clean references on an H200).
_HARMLESS_REFUSALS = {
    # Asked of every pointer argument before a launch.
    "cuPointerGetAttribute": (
        "Triton's launcher asks this about each tensor it is handed, and it fails for memory the GPU "
        "cannot use (a CPU tensor): Triton then refuses the launch with its own error. If your code "
        "passed a CPU tensor on purpose and caught that error (debugging/02's device probe does), "
        "this report is that refusal, not a fault."
    ),
    # Triton 3.9's loadBinary, for references that then pass every case.
    "cuFuncSetAttribute": (
        "Triton sets attributes of each kernel it loads (such as its shared-memory limit), and the "
        "course's correct kernels meet this refusal too under Triton 3.9 on an H200, then run without "
        "fault. Unless a memory finding follows, it is not a fault in your kernel."
    ),
}


def _api_error(f: SanitizerFinding) -> str:
    call = f.detail.split(" ", 1)[0]
    meaning = _HARMLESS_REFUSALS.get(call) if f.detail.startswith(f"{call} returned") else None
    return f"a CUDA call failed: {f.detail}. " + (
        meaning
        or "This is usually the echo of an earlier fault in a kernel (CUDA reports errors at the next "
        "call that synchronises): look at the findings before it."
    )


# What each of GSan's messages means, in the programs' terms.
_GSAN_RACES = {
    "write after read": "stored over a value that another program had loaded",
    "read after write": "loaded a value that another program had stored",
    "write after write": "stored where another program had stored",
}


def _global_race(f: SanitizerFinding) -> str:
    what = _GSAN_RACES.get(f.detail.lower().removesuffix(" race detected"), f"hit GSan's check ({f.detail})")
    where = f"line {f.line} of {Path(f.file).name}" if f.line else "an unknown line"
    who = f"program {f.block}" if f.block else "a program"
    text = (
        f"GSan: a race on global memory at {where}: {who} {what} in the same launch, with nothing (an "
        "atomic, a second launch) ordering the two. Programs run at the same time on a GPU, so the "
        "result changes from run to run: give each program its own elements, or combine them with "
        "tl.atomic_add."
    )
    if f.detail.lower().startswith("write after write"):
        text += (
            " If every program stores only elements of its own and they are 16 bits wide, this can be "
            "two neighbours in one 4-byte word, which GSan reports the same way."
        )
    return text


_SENTENCES = {
    "global-race": _global_race,
    "out-of-bounds": _out_of_bounds,
    "misaligned": _misaligned,
    "uninitialised-read": _uninitialised,
    "race": _race,
    "hardware-exception": _hardware,
    "api-error": _api_error,
}


def _number(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def _coordinates(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.replace(" ", "").split(","))


def _location(where: str) -> dict:
    """kernel, file and line from the text after "at" in a report line."""
    where = where.strip()
    for pattern in (_WHERE_NEW, _WHERE_OLD_LINE, _WHERE_OLD):
        found = pattern.match(where)
        if found:
            parts = found.groupdict()
            return {
                "kernel": parts.get("kernel") or "",
                "file": parts.get("file") or "",
                "line": int(parts["line"]) if parts.get("line") else 0,
            }
    return {"kernel": where, "file": "", "line": 0}


def _describe_location(access: str, where: str) -> str:
    place = _location(where)
    if place["line"]:
        return f"{access.lower()} at line {place['line']} of {Path(place['file']).name}"
    return f"{access.lower()} in {_short(place['kernel'])}"


def _records(text: str) -> list[list[str]]:
    """The report's records: each a first line and the lines that continue it (texts only)."""
    records: list[list[str]] = []
    for raw in text.splitlines():
        line = _LINE.match(raw)
        if not line:
            continue
        if len(line["gap"]) == 1:
            records.append([line["text"]])
        elif records:
            records[-1].append(line["text"])
    return records


def _sized_access(kind: str, match: re.Match) -> dict:
    """The fields of a record that names an access, its size and its memory space."""
    return {
        "kind": kind,
        "access": match["access"],
        "size": int(match["size"]),
        "space": _SPACES.get(match["space"], match["space"]),
    }


def _finding(tool: str, head: str, rest: list[str]) -> SanitizerFinding | None:
    """One record as a finding, or None for the banner, summaries, leaks and other chatter."""
    fields: dict = {}
    if invalid := _INVALID.match(head):
        fields.update(_sized_access("out-of-bounds", invalid))
    elif uninitialised := _UNINITIALISED.match(head):
        fields.update(_sized_access("uninitialised-read", uninitialised))
    elif host := _HOST_UNINITIALISED.match(head):
        fields.update(
            kind="uninitialised-read",
            access="copy",
            size=int(host["size"]),
            address=int(host["address"], 16),
            detail="a copy from the GPU",
        )
    elif race := _RACE.match(head):
        fields.update(
            kind="race",
            access=race["first"].lower(),
            space="shared",
            hazards=_number(race["hazards"]),
            **_location(race["where"]),
        )
    elif hazard := _OLD_HAZARD.match(head):
        fields.update(
            kind="race",
            access=f"{hazard['hazard']} hazard",
            space="shared",
            address=int(hazard["address"], 16),
            block=_coordinates(hazard["block"]),
        )
    elif api := _API_ERROR.match(head):
        fields.update(
            kind="api-error", detail=f"{api['api']} returned {api['error']} (error {api['code']}: {api['why']})"
        )
    elif _HARDWARE.match(head):
        fields.update(kind="hardware-exception", detail=head)
    else:
        return None
    for line in rest:
        if at := _AT.match(line):
            if not fields.get("kernel") and not fields.get("file"):
                fields.update(_location(at["where"]))
        elif thread := _THREAD.match(line):
            fields.update(thread=_coordinates(thread["thread"]), block=_coordinates(thread["block"]))
        elif address := _ADDRESS.match(line):
            fields["address"] = int(address["address"], 16)
            if address["state"] == "misaligned":
                fields["kind"] = "misaligned"
        elif nearest := _NEAREST.match(line):
            fields.update(
                relation="inside" if nearest["inside"] else nearest["relation"],
                distance=_number(nearest["distance"]),
                allocation=int(nearest["allocation"], 16),
                allocation_size=_number(nearest["allocation_size"]),
            )
        elif other := _RACE_OTHER.match(line):
            if not fields.get("other"):
                fields["other"] = _describe_location(other["second"], other["where"])
            fields["hazards"] = (fields.get("hazards") or 0) + (_number(other["hazards"]) or 0) or None
        elif thread_at := _THREAD_AT.match(line):  # the older racecheck: "Write Thread (0, 0, 0) at ..."
            if not fields.get("kernel") and not fields.get("file"):
                fields.update(_location(thread_at["where"]), thread=_coordinates(thread_at["thread"]))
            elif not fields.get("other"):
                fields["other"] = _describe_location(thread_at["access"], thread_at["where"])
        elif by := _UNINITIALISED_AT.match(line):
            fields.update(address=int(by["address"], 16), detail=by["by"])
    return SanitizerFinding(tool=tool, reported=head, **fields)


def parse_report(text: str, tool: str = "memcheck") -> list[SanitizerFinding]:
    """The findings in compute-sanitizer's output, in the order first reported. Reports of the
    same kind of access at the same place (one per thread, usually) become one finding with a
    ``count``."""
    merged: dict[tuple, SanitizerFinding] = {}
    for head, *rest in _records(text):
        finding = _finding(tool, head, rest)
        if finding is None:
            continue
        key = (
            finding.kind,
            finding.access,
            finding.space,
            finding.kernel,
            finding.file,
            finding.line,
            finding.detail if finding.kind in ("api-error", "hardware-exception") else "",
        )
        if key in merged:
            merged[key] = replace(merged[key], count=merged[key].count + 1)
        else:
            merged[key] = finding
    return list(merged.values())


def reported_warnings(text: str) -> int:
    """The hazards racecheck's summary counts as warnings, not errors (0 without such a summary)."""
    for head, *_ in _records(text):
        summary = _RACE_SUMMARY.match(head)
        if summary:
            return _number(summary["warnings"]) or 0
    return 0


def reported_errors(text: str) -> int | None:
    """The error count of the report's summary line (None when it has none)."""
    for head, *_ in _records(text):
        summary = _ERROR_SUMMARY.match(head) or _RACE_SUMMARY.match(head)
        if summary:
            return _number(summary["errors"] if "errors" in summary.groupdict() else summary["count"])
    return None


def gsan_command(script_and_args: list[str]) -> list[str]:
    """The command line that runs a Python script (and its arguments) under Triton's GSan."""
    return [sys.executable, "-m", "triton.tools.gsan", *script_and_args]


def gsan_available() -> bool:
    """Whether the installed Triton has GSan (3.9 and later)."""
    return (
        importlib.util.find_spec("triton.tools") is not None
        and importlib.util.find_spec("triton.tools.gsan") is not None
    )


_GSAN_ASSERT = re.compile(
    r"^(?P<file>[^\s:]+):(?P<line>\d+): .*block: \[(?P<block>[\d,]+)\], thread: \[(?P<thread>[\d,]+)\] "
    r"Assertion `(?P<message>[^`]*)` failed"
)


def parse_gsan(text: str) -> list[SanitizerFinding]:
    """GSan's findings: it fails a device-side assertion in every thread that finds a race, printed
    as ``file.py:172: : block: [78,0,0], thread: [64,0,0] Assertion `Write after read race
    detected` failed.``; those of one line and message become one finding with a ``count``."""
    merged: dict[tuple, SanitizerFinding] = {}
    for match in map(_GSAN_ASSERT.search, text.splitlines()):
        if not match:
            continue
        key = (match["file"], int(match["line"]), match["message"])
        if key in merged:
            merged[key] = replace(merged[key], count=merged[key].count + 1)
            continue
        message = match["message"]
        merged[key] = SanitizerFinding(
            tool="gsan",
            kind="global-race",
            access="read" if message.lower().startswith("read") else "write",
            file=match["file"],
            line=int(match["line"]),
            block=tuple(int(n) for n in match["block"].split(",")),
            thread=tuple(int(n) for n in match["thread"].split(",")),
            detail=message,
            reported=match.group(0),
        )
    return list(merged.values())
