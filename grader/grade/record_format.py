"""The format of a record: what grading one file of one module leaves behind, as typed
dataclasses with a version.

The run phase fills a ``Record`` (``grader.grade.results``); the store writes it as JSON and reads
it back only when it has this version and every field with its type (``grader.grade.store``);
the record phase, the tables and the exports read that JSON. A change of what a record means
(a field added, a rule of scoring that reads it differently) raises ``RECORD_VERSION``, so that
records of the old format are graded again rather than misread.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, get_type_hints

# 6: case rows name their part, and a module of several parts (grader.core.cases.Part) is timed
# per part.
RECORD_VERSION = 6


@dataclass
class CaseRow:
    """One case's outcome. Hidden cases are named by number only ("hidden case 3")."""

    name: str
    visibility: str  # "public" or "hidden"
    passed: bool
    kind: str  # what failed ("" when passed): a judging kind, or an integrity kind
    message: str  # the learner's feedback ("" when passed); for hidden cases nothing they chose
    seconds: float
    part: str | None = None  # the module's exercise, in a module of several (None: left out of the JSON)


@dataclass
class Count:
    passed: int
    total: int


@dataclass
class Totals:
    public: Count
    hidden: Count
    passed: int
    total: int
    score: float  # passed / total, 0 under an integrity finding


@dataclass
class Integrity:
    """A way around the exercise, which withholds every point (``grader.grade.scoring.withheld``)."""

    violation: str
    message: str


@dataclass
class PartInfo:
    """One exercise of a module of several: its name, title and share of the points."""

    name: str
    title: str
    weight: float


@dataclass
class Record:
    module: str
    submission_sha256: str
    cases_sha256: str
    device: str
    graded_at: str
    summary: str
    load_error: str | None
    todos: list[str]
    starting_kernel: bool  # the file is still the module's starting kernel (same syntax tree)
    cases: list[CaseRow]
    parts: list[PartInfo]
    totals: Totals
    integrity: Integrity | None
    refusal: str | None  # the policy gate's reason, when it refused the file
    performance: dict[str, Any]  # graded, credit, ratio, reason, ... (grader.grade.timing); per part under "parts"
    note: str | None  # a crash no single case caused
    cpu_seconds: dict[str, Any]
    protections: dict[str, Any]
    evidence: str
    child_processes: int
    record_version: int = field(default=RECORD_VERSION)

    def to_json(self) -> dict:
        """The record as the JSON object the store writes (a row's part only where there is one)."""
        data = dataclasses.asdict(self)
        for row in data["cases"]:
            if row["part"] is None:
                del row["part"]
        return data


_JSON_TYPES = {str: str, bool: bool, int: int, float: (int, float)}


def problems(data: Any) -> list[str]:
    """What keeps ``data`` from being a record of this format: wrong version, missing fields,
    fields of another JSON type (checked one level into the case rows and the totals)."""
    if not isinstance(data, dict):
        return ["not a JSON object"]
    if data.get("record_version") != RECORD_VERSION:
        return [f"record_version {data.get('record_version')!r}, not {RECORD_VERSION}"]
    found = _fields_problems(Record, data, "")
    for index, row in enumerate(data.get("cases") or []):
        found += _fields_problems(CaseRow, row, f"cases[{index}].")
    totals = data.get("totals")
    if isinstance(totals, dict):
        found += _fields_problems(Totals, totals, "totals.")
    return found


def _fields_problems(kind: type, data: Any, where: str) -> list[str]:
    if not isinstance(data, dict):
        return [f"{where.rstrip('.') or 'record'} is not an object"]
    hints = get_type_hints(kind)
    found = []
    for item in dataclasses.fields(kind):
        if item.name not in data:
            if item.default is dataclasses.MISSING or item.default is not None:
                found.append(f"{where}{item.name} is missing")
            continue
        if not _fits(hints[item.name], data[item.name]):
            found.append(f"{where}{item.name} has the wrong type ({type(data[item.name]).__name__})")
    return found


def _fits(hint: Any, value: Any) -> bool:
    """Whether a JSON value fits a field's type (dataclasses as objects, lists as arrays)."""
    options = getattr(hint, "__args__", None) if type(hint).__name__ == "UnionType" else None
    if options is not None:
        return any(_fits(option, value) for option in options)
    if hint is type(None):
        return value is None
    if dataclasses.is_dataclass(hint):
        return isinstance(value, dict)
    origin = getattr(hint, "__origin__", None)
    if origin is list:
        return isinstance(value, list)
    if origin is dict:
        return isinstance(value, dict)
    expected = _JSON_TYPES.get(hint)
    if expected is None:
        return True
    return isinstance(value, expected) and (hint is bool or not isinstance(value, bool))
