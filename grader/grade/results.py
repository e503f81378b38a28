"""The record of one graded submission of one module: what feedback, the gradebook and the
instructors' tables read. Hidden cases appear by number, with ``judging.hidden_message``'s words."""

from __future__ import annotations

import ast
import datetime
import functools
from typing import TYPE_CHECKING

from grader.core import crashes, device, syntax
from grader.core.cases import part_of, spec_for
from grader.core.evidence import EVIDENCE
from grader.core.loading import todo_summary
from grader.core.markers import MarkerError, open_todos, stub_for, todos_behind
from grader.grade.judging import INTEGRITY, Verdict, hidden_message
from grader.grade.record_format import CaseRow, Count, Integrity, PartInfo, Record, Totals

if TYPE_CHECKING:
    from grader.grade.ledger import Ledger
    from grader.grade.plan import Plan


def build(plan: Plan, ledger: Ledger, submission_sha: str, cases_sha: str) -> dict:
    """The record of a finished grading, from its plan and its ledger: per-case rows (hidden cases by
    number only), totals, the integrity finding, performance, and how the grading went."""
    source = plan.source.decode(errors="replace")
    todos = open_todos(source)
    hint = todo_summary(todos, track=plan.module.track)

    # Each parses the file: once per function, not once per case (a stub fails every case).
    @functools.cache
    def behind(api: str) -> list:  # the open TODOs that can change what the function computes
        return todos_behind(source, todos, api) if todos else []

    @functools.cache
    def hidden_note(api: str) -> str:
        return hidden_todo_note(source, todos, api, plan.module.track)

    parts = plan.parts
    rows, counts = [], {"public": [0, 0], "hidden": [0, 0]}
    hidden_number = 0
    for index, (case, visibility) in enumerate(plan.cases):
        verdicts = [ledger.verdicts.get(t.id) for t in plan.trials if t.case_index == index]
        if any(v is None for v in verdicts):
            verdict = Verdict(False, "load", "Not run: kernel.py could not be imported (see the message above).")
        else:
            failed = [v for v in verdicts if not v.passed]
            verdict = failed[0] if failed else verdicts[0]
            verdict = Verdict(
                not failed, verdict.kind, verdict.message, sum(v.seconds for v in verdicts), crash=verdict.crash
            )
        if visibility == "hidden":
            hidden_number += 1
            name = f"hidden case {hidden_number}"
            shown_as_hidden = not verdict.passed and verdict.kind != "load"
            message = hidden_message(verdict, spec_for(case, plan.spec).api) if shown_as_hidden else verdict.message
            if not verdict.passed and verdict.kind != "load":
                message += hidden_note(spec_for(case, plan.spec).api)
        else:
            name = case.name
            message = verdict.message
            case_hint = todo_summary(behind(spec_for(case, plan.spec).api), track=plan.module.track)
            if not verdict.passed and case_hint and verdict.kind != "load":
                message += f"\n{case_hint}"
        counts[visibility][0] += verdict.passed
        counts[visibility][1] += 1
        # A module of several exercises names each case's (grader.grade.scoring weighs them).
        part = part_of(parts, spec_for(case, plan.spec).api).name if len(parts) > 1 else None
        rows.append(
            CaseRow(
                name,
                visibility,
                verdict.passed,
                "" if verdict.passed else verdict.kind,
                "" if verdict.passed else message,
                round(verdict.seconds, 3),
                part,
            )
        )
    passed = counts["public"][0] + counts["hidden"][0]
    total = counts["public"][1] + counts["hidden"][1]
    integrity = next(
        ({"violation": row.kind, "message": INTEGRITY[row.kind]} for row in rows if row.kind in INTEGRITY), None
    )
    if integrity is None and (ledger.performance or {}).get("integrity"):
        integrity = ledger.performance["integrity"]  # the timed calls went around the exercise
    if plan.refusal is not None:  # the reasons themselves, for feedback and the tables
        integrity = {"violation": "policy", "message": plan.refusal}
        summary = f"No points for this module: {plan.refusal}"
    elif integrity is not None:
        summary = f"No points for this module: {integrity['message']}"
    elif ledger.load_error is not None:
        ran = "no case ran" if not ledger.verdicts else f"only {len(ledger.verdicts)} trial(s) ran"
        summary = f"kernel.py could not be imported, so {ran}.\n{ledger.load_error}"
    elif passed == total:
        summary = f"All {total} cases pass."
    else:
        summary = (
            f"{passed} of {total} cases pass ({counts['public'][0]}/{counts['public'][1]} public, "
            f"{counts['hidden'][0]}/{counts['hidden'][1]} hidden)."
        ) + (f"\n{hint}" if hint else "")
    note = crash_note(plan, ledger)
    if note and integrity is None and ledger.load_error is None:
        summary += f"\n{note}"
    performance = ledger.performance
    if integrity is not None and performance.get("graded") and not performance.get("integrity"):
        performance = {**performance, "credit": 0.0, "reason": "withheld: " + integrity["message"]}
    return Record(
        module=plan.module.id,
        submission_sha256=submission_sha,
        cases_sha256=cases_sha,
        device=device.describe(),
        graded_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        summary=summary,
        load_error=ledger.load_error,
        todos=[str(t) for t in todos],
        starting_kernel=is_starting_kernel(source, plan.module),
        cases=rows,
        parts=[PartInfo(part.name, part.title, part.weight) for part in parts] if len(parts) > 1 else [],
        totals=Totals(
            Count(*counts["public"]),
            Count(*counts["hidden"]),
            passed,
            total,
            round(passed / total, 4) if total and integrity is None else 0.0,
        ),
        integrity=Integrity(**integrity) if integrity is not None else None,
        refusal=plan.refusal,
        performance=performance,
        note=note,
        cpu_seconds={"budget": plan.budget, "spent": round(ledger.cpu_spent, 1)},
        protections=ledger.protections,
        evidence=EVIDENCE["interpreter"]
        if not device.is_cuda()
        else EVIDENCE["cuda" if ledger.traced else "cuda-no-trace"],
        child_processes=ledger.children,
    ).to_json()


def _definitions(source: str) -> dict[str, tuple[int, int]] | None:
    """{name: (first line, last line)} of the file's top-level functions and classes, decorators
    included; None when the file does not parse."""
    try:
        tree = syntax.parse(source)  # the grader's threads parse one at a time (Python 3.11)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return {
        node.name: (min([node.lineno] + [d.lineno for d in node.decorator_list]), node.end_lineno or node.lineno)
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def hidden_todo_note(source: str, todos: list, api: str, track: str) -> str:
    """What a failed hidden case adds about open TODOs: the number open in the code ``api``
    reaches (``todos_behind``), where the file says which code that is; else the number open in
    the file, as a possible cause. In the debugging track the kernels' wrong results come from
    planted bugs, which no TODO marks: only TODOs inside a function the call reaches count there
    (the tools the module asks for), not those between functions."""
    if not todos:
        return ""
    spans = _definitions(source)
    if spans is None or api not in spans:
        return f" ({len(todos)} TODO(s) are still open in kernel.py; they may be the cause.)"
    reached = todos_behind(source, todos, api)
    if track == "debugging":
        reached = [todo for todo in reached if any(first <= todo.line <= last for first, last in spans.values())]
    if not reached:
        return ""
    return f" ({len(reached)} TODO(s) are still open in the code {api}() runs: complete them first.)"


def normalised_ast(source: str) -> str | None:
    """``ast.dump`` of the parsed file without its docstrings (comments, blank lines and spacing
    are not in the tree, nor are line numbers): equal for two files that differ only in those.
    None when the file does not parse. Parsing never runs the file."""
    try:
        tree = syntax.parse(source)  # the grader's threads parse one at a time (Python 3.11)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
                first = node.body[0]
                if (
                    isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)
                ):
                    node.body = node.body[1:] or [ast.Pass()]
        return ast.dump(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def is_starting_kernel(source: str, module) -> bool | None:
    """Whether ``source`` is still the module's starting kernel (the generated stub), edits to
    comments, docstrings and layout aside: where the starting kernel is already correct, only
    this tells doing nothing from finishing without a GPU. None where this checkout cannot
    generate the stub (no reference solution)."""
    try:
        stub = stub_for(module)
    except (OSError, MarkerError):
        return None
    if source == stub:
        return True
    expected = normalised_ast(stub)
    return None if expected is None else normalised_ast(source) == expected


def crash_note(plan: Plan, ledger: Ledger) -> str | None:
    """What to say of crashes that no case caused alone (each of the cases a crashed child
    ran got its verdict in a fresh process, and none crashed there)."""
    trials = {trial.id: trial for trial in plan.trials}
    for ended, ran in ledger.crashes:
        if any(trial in trials and plan.cases[trials[trial].case_index][1] == "hidden" for trial in ran):
            continue  # how a process of hidden cases ended is the submission's choice: never said
        verdicts = [ledger.verdicts.get(t) for t in ran]
        if all(v is not None and v.kind != "not_run" and v.crash is None for v in verdicts):
            return (
                f"Note: a process that ran several cases in a row {ended.how}, but each of those cases "
                "ran again alone in a fresh process without crashing, so none is blamed for it. "
                f"{crashes.explain(ended.returncode)}"
            ).rstrip()
    return None
