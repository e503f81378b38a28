"""A view of the class, module by module: how many students pass each case, what goes wrong most
often, the integrity findings, and performance where it was graded.

``write`` puts it in ``overview.html`` (one static page, no JavaScript, nothing fetched) and
``markdown`` gives the same as a section of ``report.md``. The input is the grading's rows
(``grader.grade.pipeline.Row``): only their student, module and run-phase record are read.

Hidden cases appear by number only, with how many pass: never their definition nor their
messages. Every text taken from a record is escaped, since a message can quote what a
submission chose (an exception's text, a refused line).
"""

from __future__ import annotations

import html
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from grader.core.diagnosis import gist
from grader.grade.scoring import NOT_GRADED_HERE, no_work_reason, not_graded_here

TOP_DIAGNOSES = 5  # per module: the rest are rarer than the ones shown


@dataclass
class CaseTally:
    """How many of a module's graded submissions pass one case."""

    name: str  # a public case's label, or "hidden case N"
    visibility: str
    passed: int = 0
    total: int = 0


@dataclass
class Diagnosis:
    """One kind of failure of the public cases: its first line as first seen, how many failed
    cases say it (numbers aside) and of how many students."""

    text: str
    cases: int = 0
    students: set[str] = field(default_factory=set)


@dataclass
class ModuleView:
    module: str
    submissions: int = 0  # rows of the module that have a run-phase record
    no_record: int = 0  # rows without one (refused at collection, or the grader's own error)
    all_pass: int = 0
    starting_kernels: int = 0  # still the starting kernel, comments and layout aside
    not_imported: int = 0
    not_graded_here: int = 0  # no part graded on this machine: the starting kernel passes every case, no GPU
    cases: dict[tuple[str, str], CaseTally] = field(default_factory=dict)
    diagnoses: dict[str, Diagnosis] = field(default_factory=dict)
    integrity: dict[str, list[str]] = field(default_factory=dict)  # finding -> students
    ratios: list[float] = field(default_factory=list)  # speed / reference, where performance was graded
    credits: list[float] = field(default_factory=list)  # the share of the performance points earned
    not_timed: Counter = field(default_factory=Counter)  # why performance was not graded -> submissions

    def top_diagnoses(self) -> list[Diagnosis]:
        return sorted(self.diagnoses.values(), key=lambda d: (-d.cases, d.text))[:TOP_DIAGNOSES]


def _first_line(text: str) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def _case_names(cases: list[dict]) -> list[tuple[str, str]]:
    """(visibility, name) per case row: public cases by their label, hidden cases renumbered
    in order, so that no text of a hidden case row is ever shown."""
    names, hidden = [], 0
    for row in cases:
        if row.get("visibility") == "hidden":
            hidden += 1
            names.append(("hidden", f"hidden case {hidden}"))
        else:
            names.append(("public", str(row.get("label") or row.get("name") or "?")))
    return names


def _integrity_finding(record: dict) -> str:
    """The finding in a few words: the refusal's heading, or the grader's message."""
    finding = record["integrity"]
    if finding.get("violation") == "policy":
        return "refused by the policy gate: " + _first_line(finding.get("message", ""))
    return _first_line(finding.get("message", "")) or str(finding.get("violation"))


def _add_performance(view: ModuleView, record: dict) -> None:
    performance = record.get("performance") or {}
    if not performance.get("graded"):
        reason = performance.get("reason") or ""
        view.not_timed[reason.removeprefix("not graded: ") or "no reason given"] += 1
        return
    if "credit" in performance:  # as timed: no need to read the module's thresholds again
        credit = float(performance["credit"])
    else:
        from grader.grade.record import performance_credit

        credit, _, _ = performance_credit(record)
    view.credits.append(credit or 0.0)
    if performance.get("ratio") is not None:
        view.ratios.append(float(performance["ratio"]))


def _add(view: ModuleView, student: str, record: dict) -> None:
    """Count one record into its module's view."""
    view.submissions += 1
    view.starting_kernels += bool(record.get("starting_kernel"))
    view.not_imported += bool(record.get("load_error"))
    rows = record.get("cases") or []
    view.all_pass += bool(rows) and all(row.get("passed") for row in rows) and not record.get("integrity")
    for (visibility, name), row in zip(_case_names(rows), rows):
        tally = view.cases.setdefault((visibility, name), CaseTally(name, visibility))
        tally.total += 1
        tally.passed += bool(row.get("passed"))
        if visibility == "public" and not row.get("passed"):
            text = _first_line(row.get("diagnosis") or row.get("message") or "") or "failed, with no message"
            diagnosis = view.diagnoses.setdefault(gist(text), Diagnosis(text))
            diagnosis.cases += 1
            diagnosis.students.add(student)
    if record.get("integrity"):
        view.integrity.setdefault(_integrity_finding(record), []).append(student)
    _add_performance(view, record)


def summarise(rows) -> list[ModuleView]:
    """One view per module that has rows, in module order."""
    views: dict[str, ModuleView] = {}
    for row in sorted(rows, key=lambda r: (r.module.id, r.student)):
        view = views.setdefault(row.module.id, ModuleView(row.module.id))
        if row.record is None:
            view.no_record += 1
        else:
            _add(view, row.student, row.record)
            view.not_graded_here += not_graded_here(row.record, row.module.track)
    return list(views.values())


def performance_text(view: ModuleView) -> str:
    """Performance in one sentence: how many were timed and how fast, or why none was."""
    if not view.credits:
        if not view.not_timed:
            return "no submission to time"
        reasons = "; ".join(f"{reason} ({n} submission(s))" for reason, n in view.not_timed.most_common())
        return f"not graded: {reasons}"
    full = sum(credit >= 1.0 for credit in view.credits)
    none = sum(credit <= 0.0 for credit in view.credits)
    speed = f", median speed {statistics.median(view.ratios):.2f} x the reference's" if view.ratios else ""
    text = f"{len(view.credits)} timed{speed}; {full} with full points, {none} with none"
    return text + (f"; {sum(view.not_timed.values())} not graded" if view.not_timed else "")


def summary_text(view: ModuleView) -> str:
    """The module's submissions in one sentence."""
    parts = [f"{view.submissions} submission(s)", f"{view.all_pass} pass every case"]
    if view.starting_kernels:
        parts.append(f"{view.starting_kernels} still the unchanged starting kernel")
    if view.not_imported:
        parts.append(f"{view.not_imported} could not be imported")
    if view.integrity:
        parts.append(f"{sum(map(len, view.integrity.values()))} with an integrity finding")
    if view.no_record:
        parts.append(f"{view.no_record} not graded (no run-phase record)")
    text = ", ".join(parts)
    if view.not_graded_here:
        text += f". {view.not_graded_here} {NOT_GRADED_HERE} (0 of 0): {no_work_reason()}"
    return text


# ----------------------------------------------------------------------------------------------
# Markdown (a section of report.md)
# ----------------------------------------------------------------------------------------------

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|#~])")


def md(text: str) -> str:
    """``text`` as literal Markdown table content: one line, HTML escaped (GitHub renders inline
    HTML), Markdown's punctuation backslash-escaped, the column separator included."""
    one_line = " ".join(str(text).split())
    return _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=False))


def markdown(views: list[ModuleView]) -> list[str]:
    """The view of the class as Markdown lines: per module, a summary, the cases and how many
    pass them, the most common diagnoses, integrity findings and performance."""
    lines = [
        "## The class, module by module",
        "",
        "How many submissions pass each case (hidden cases by number only), the most common "
        "diagnoses of failed public cases, integrity findings and performance. The same as a page: "
        "[overview.html](overview.html).",
        "",
    ]
    for view in views:
        lines += [f"### {md(view.module)}", "", md(summary_text(view)) + ".", "", "| case | pass |", "|---|---|"]
        lines += [f"| {md(t.name)} | {t.passed}/{t.total} |" for t in view.cases.values()]
        if view.diagnoses:
            lines += ["", "| most common diagnosis (public cases) | failed cases | students |", "|---|---|---|"]
            lines += [f"| {md(d.text)} | {d.cases} | {len(d.students)} |" for d in view.top_diagnoses()]
        if view.integrity:
            lines += ["", "Integrity findings:", ""]
            lines += [f"- {md(finding)}: {md(', '.join(students))}" for finding, students in view.integrity.items()]
        lines += ["", f"Performance: {md(performance_text(view))}.", ""]
    return lines


# ----------------------------------------------------------------------------------------------
# The page
# ----------------------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }
h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
td.count { text-align: right; white-space: nowrap; }
.bar { display: inline-block; height: 0.8em; background: #4a8; }
.gap { display: inline-block; height: 0.8em; background: #e66; }
.hidden { color: #666; }
"""


def _bar(passed: int, total: int) -> str:
    """A pass-rate bar drawn with two boxes (no script, no image)."""
    width = 8.0  # em
    share = passed / total if total else 0.0
    return (
        f'<span class="bar" style="width: {width * share:.2f}em"></span>'
        f'<span class="gap" style="width: {width * (1 - share):.2f}em"></span>'
    )


def _module_html(view: ModuleView) -> list[str]:
    e = html.escape
    out = [
        f"<h2>{e(view.module)}</h2>",
        f"<p>{e(summary_text(view))}.</p>",
        "<table><tr><th>case</th><th>pass</th><th></th></tr>",
    ]
    for tally in view.cases.values():
        css = ' class="hidden"' if tally.visibility == "hidden" else ""
        out.append(
            f'<tr{css}><td>{e(tally.name)}</td><td class="count">{tally.passed}/{tally.total}</td>'
            f"<td>{_bar(tally.passed, tally.total)}</td></tr>"
        )
    out.append("</table>")
    if view.diagnoses:
        out.append(
            "<table><tr><th>most common diagnosis (public cases)</th><th>failed cases</th><th>students</th></tr>"
        )
        out += [
            f'<tr><td>{e(d.text)}</td><td class="count">{d.cases}</td><td class="count">{len(d.students)}</td></tr>'
            for d in view.top_diagnoses()
        ]
        out.append("</table>")
    if view.integrity:
        out.append("<p>Integrity findings:</p><ul>")
        out += [f"<li>{e(finding)}: {e(', '.join(students))}</li>" for finding, students in view.integrity.items()]
        out.append("</ul>")
    out.append(f"<p>Performance: {e(performance_text(view))}.</p>")
    return out


def page(views: list[ModuleView]) -> str:
    """The whole page, self-contained: its style inline, no script, every record text escaped."""
    body = [line for view in views for line in _module_html(view)] or ["<p>No submission was graded.</p>"]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            "<title>The class, module by module</title>",
            f"<style>{_STYLE}</style></head><body>",
            "<h1>The class, module by module</h1>",
            "<p>How many submissions pass each case (hidden cases by number only), the most common "
            "diagnoses of failed public cases, integrity findings and performance.</p>",
            *body,
            "</body></html>",
            "",
        ]
    )


def write(rows, path: Path) -> list[ModuleView]:
    """Write ``overview.html`` for ``rows`` at ``path``; return the views (for report.md)."""
    views = summarise(rows)
    Path(path).write_text(page(views))
    return views
