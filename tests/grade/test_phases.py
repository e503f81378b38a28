"""Progress of the grader's phases (grader/grade/phases.py) and the counting of nbgrader's log
lines (grader/grade/course.py): a fake clock and a fake stream, no sleeping, nothing that
depends on how long anything takes."""

from __future__ import annotations

import io
import subprocess
import sys

from grader.grade import course
from grader.grade.phases import Phases, duration, quiet_bar, table


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _phases(interactive: bool, enabled: bool = True, every: float = 5.0):
    clock, stream = Clock(), io.StringIO()
    return Phases(enabled, stream, clock, interactive, every, width=200), clock, stream


def test_counts_eta_and_the_summary_table():
    phases, clock, _ = _phases(interactive=False)
    with phases.phase("generate assignments"):
        clock.now += 2.5
    with phases.phase("run phase", unit="gradings") as bar:
        bar.total = 10
        bar.advance(2, tag="reused")  # at once: done, but no part of the rate
        assert bar.eta() is None  # no item has ended by working yet
        clock.now += 30
        bar.advance()
        assert bar.eta() == 30 / 1 * 7
        clock.now += 30
        bar.advance(note="ada 01: 12/12")
        assert (bar.done, bar.eta()) == (4, 60 / 2 * 6)
        bar.advance(6)
        assert bar.eta() is None  # all done
    with phases.phase("autograde", 3, "notebooks") as bar:
        clock.now += 4
        bar.advance(5)  # more lines than notebooks: the real count is set afterwards
        bar.finish(2)
    with phases.phase("export", unit="grades") as bar:
        bar.finish(7)
    phases.skip("feedback", "feedback pages", "nothing changed")

    assert phases.seconds == {"generate assignments": 2.5, "run phase": 60.0, "autograde": 4.0, "export": 0.0}
    assert [(r.name, r.done, r.total) for r in phases.results] == [
        ("generate assignments", None, None),
        ("run phase", 10, 10),
        ("autograde", 2, 3),
        ("export", 7, 7),
        ("feedback", 0, 0),
    ]
    assert table(phases.results).splitlines() == [
        "phase                 count                      seconds",
        "generate assignments                                 2.5",
        "run phase             10/10 gradings (2 reused)     60.0",
        "autograde             2/3 notebooks                  4.0",
        "export                7/7 grades                     0.0",
        "feedback              nothing changed                  -",
        "total                                               66.5",
    ]


def test_a_phase_that_fails_is_timed_and_keeps_its_count():
    phases, clock, stream = _phases(interactive=True)
    try:
        with phases.phase("run phase", 4, "gradings") as bar:
            bar.advance()
            clock.now += 1
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert phases.seconds == {"run phase": 1.0} and phases.results[0].done == 1
    last = stream.getvalue().split("\r")[-1]
    assert last.endswith("\n") and last.rstrip() == "run phase: 1/4 gradings, 1.0 s"  # the terminal line ended


def test_a_total_known_later_starts_the_plain_lines():
    phases, clock, stream = _phases(interactive=False)
    with phases.phase("run phase", unit="gradings") as bar:
        assert stream.getvalue() == ""
        bar.total = 2
        assert stream.getvalue() == "run phase: 0/2 gradings (0%)\n"
        bar.advance(2, tag="reused")
    assert stream.getvalue().splitlines()[1:] == ["run phase: 2/2 gradings (2 reused), 0.0 s"]


def test_plain_output_is_lines_at_most_every_few_seconds_and_at_the_end():
    phases, clock, stream = _phases(interactive=False, every=5)
    with phases.phase("autograde", 6, "notebooks") as bar:
        for _ in range(6):
            clock.now += 2
            bar.advance(note="not shown in plain lines")
    assert "\r" not in stream.getvalue()
    assert stream.getvalue().splitlines() == [
        "autograde: 0/6 notebooks (0%)",
        "autograde: 3/6 notebooks (50%), 6 s, ETA 6 s",  # 6 s after the first line
        "autograde: 6/6 notebooks, 12.0 s",  # 100%: always, and only once
    ]


def test_a_terminal_gets_one_bar_redrawn_in_place():
    phases, clock, stream = _phases(interactive=True)
    with phases.phase("feedback", 2, "feedback pages") as bar:
        clock.now += 3
        bar.advance(note="ada")
        clock.now += 3
        bar.advance(note="bob")
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    frames = text.rstrip("\n").split("\r")[1:]
    assert frames[0].startswith("feedback |........................| 0/2 feedback pages 0%")
    assert frames[1].startswith("feedback |############............| 1/2 feedback pages 50% 3 s, ETA 3 s  ada")
    assert frames[2].startswith("feedback |########################| 2/2 feedback pages 100% 6 s  bob")
    assert frames[3].rstrip() == "feedback: 2/2 feedback pages, 6.0 s"
    assert all(len(later) >= len(earlier.rstrip()) for earlier, later in zip(frames, frames[1:]))  # covered


def test_disabled_phases_print_nothing_and_still_measure():
    phases, clock, stream = _phases(interactive=True, enabled=False)
    with phases.phase("collect", unit="submissions") as bar:
        bar.total = 1
        clock.now += 1
        bar.advance()
    phases.skip("autograde")
    assert stream.getvalue() == "" and phases.seconds == {"collect": 1.0}
    quiet_bar(3).advance()  # (what collect uses when given no bar)


def test_durations():
    assert [duration(s) for s in (0, 12.4, 59.6, 185, 3723)] == ["0 s", "12 s", "1:00", "3:05", "1:02:03"]


# --- nbgrader's log lines ----------------------------------------------------------------------

# As nbgrader 0.9.6 logs them (logs/nbgrader-autograde.log of a run): two submissions.
AUTOGRADE_LOG = """\
$ nbgrader autograde * --Autograde.autograde_preprocessors=...
[AutogradeApp | WARNING] No nbgrader_config.py file found (rerun with --debug to see where nbgrader is looking)
[AutogradeApp | INFO] Copying /c/submitted/ada/m01/graded-from.txt -> /c/autograded/ada/m01/graded-from.txt
[AutogradeApp | INFO] Copying /c/submitted/ada/m01/kernel.py -> /c/autograded/ada/m01/kernel.py
[AutogradeApp | INFO] Creating/updating student with ID 'ada': {}
[AutogradeApp | INFO] Overwriting files with master versions from the source directory
[AutogradeApp | INFO] Sanitizing /c/submitted/ada/m01/m01.ipynb
[AutogradeApp | INFO] Converting notebook /c/submitted/ada/m01/m01.ipynb
[AutogradeApp | INFO] Writing 4144 bytes to /c/autograded/ada/m01/m01.ipynb
[AutogradeApp | INFO] Autograding /c/autograded/ada/m01/m01.ipynb
[AutogradeApp | INFO] Converting notebook /c/autograded/ada/m01/m01.ipynb
[IPKernelApp] WARNING | Kernel is running over TCP without encryption.
[AutogradeApp | INFO] Writing 9063 bytes to /c/autograded/ada/m01/m01.ipynb
[AutogradeApp | INFO] Setting destination file permissions to 444
[AutogradeApp | INFO] Skipping existing assignment: /c/autograded/bob/m01
[AutogradeApp | INFO] Copying /c/submitted/eve/m01/kernel.py -> /c/autograded/eve/m01/kernel.py
[AutogradeApp | INFO] Creating/updating student with ID 'eve': {}
[AutogradeApp | INFO] Sanitizing /c/submitted/eve/m01/m01.ipynb
[AutogradeApp | INFO] Converting notebook /c/submitted/eve/m01/m01.ipynb
[AutogradeApp | INFO] Writing 4144 bytes to /c/autograded/eve/m01/m01.ipynb
[AutogradeApp | INFO] Autograding /c/autograded/eve/m01/m01.ipynb
[AutogradeApp | INFO] Converting notebook /c/autograded/eve/m01/m01.ipynb
[AutogradeApp | INFO] Writing 9965 bytes to /c/autograded/eve/m01/m01.ipynb
[AutogradeApp | INFO] Setting destination file permissions to 444
"""

FEEDBACK_LOG = """\
[GenerateFeedbackApp | INFO] Copying /c/autograded/ada/m01/kernel.py -> /c/feedback/ada/m01/kernel.py
[GenerateFeedbackApp | INFO] Converting notebook /c/autograded/ada/m01/m01.ipynb
[GenerateFeedbackApp | INFO] Writing 134314 bytes to /c/feedback/ada/m01/m01.html
[GenerateFeedbackApp | INFO] Setting destination file permissions to 644
[GenerateFeedbackApp | INFO] Copying /c/autograded/eve/m01/kernel.py -> /c/feedback/eve/m01/kernel.py
[GenerateFeedbackApp | INFO] Converting notebook /c/autograded/eve/m01/m01.ipynb
[GenerateFeedbackApp | INFO] Writing 132497 bytes to /c/feedback/eve/m01/m01.html
[GenerateFeedbackApp | INFO] Setting destination file permissions to 644
"""


def _count(command: str, log: str) -> tuple[list[int], int]:
    """How many items had ended after each line, and after the command's end."""
    ended = []
    items = course.ItemLines(command, lambda: ended.append(1))
    after = []
    for line in log.splitlines():
        items(line)
        after.append(len(ended))
    items.end()
    return after, len(ended)


def test_autograde_lines_count_each_notebook_as_it_ends():
    after, total = _count("autograde", AUTOGRADE_LOG)
    lines = AUTOGRADE_LOG.splitlines()
    first_end = lines.index("[AutogradeApp | INFO] Setting destination file permissions to 444")
    assert after[first_end - 1] == 0 and after[first_end] == 1  # ada: when nbgrader wrote it
    assert after[-2] == 1 and after[-1] == 2 and total == 2  # bob skipped, eve done


def test_feedback_lines_count_each_page():
    after, total = _count("generate_feedback", FEEDBACK_LOG)
    assert after == [0, 0, 0, 1, 1, 1, 1, 2] and total == 2


def test_a_failed_notebook_and_unknown_lines_still_end_at_the_commands_end():
    failed = AUTOGRADE_LOG.replace("[AutogradeApp | INFO] Setting destination file permissions to 444\n", "", 1)
    failed = failed.replace(
        "[AutogradeApp | INFO] Skipping existing",
        "[AutogradeApp | ERROR] There was an error "
        "processing assignment: /c/submitted/ada/m01\n[AutogradeApp | INFO] Skipping existing",
    )
    after, total = _count("autograde", failed)
    assert total == 2 and after[-1] == 2  # ada's end is eve's start
    reworded = AUTOGRADE_LOG.replace("Setting destination file permissions", "Set permissions")
    after, total = _count("autograde", reworded)
    assert after[-1] == 1 and total == 2  # one late, the last at the end
    assert _count("autograde", "nothing nbgrader ever said\n")[1] == 0
    assert _count("export", AUTOGRADE_LOG)[1] == 0  # a command counted by its output instead


def test_the_log_is_followed_line_by_line_to_its_last_line(tmp_path):
    log = tmp_path / "nbgrader-x.log"
    lines = []
    with open(log, "a") as handle, open(log, "rb") as reader:
        handle.write("$ header\n")
        handle.flush()
        reader.seek(handle.tell())
        script = "import sys; sys.stderr.write('one\\ntwo\\n'); sys.stderr.flush(); print('last', end='')"
        with subprocess.Popen([sys.executable, "-c", script], stdout=handle, stderr=subprocess.STDOUT) as process:
            course._follow(process, reader, lines.append, poll=0.05)
    assert lines == ["one", "two", "last"]
    assert log.read_text() == "$ header\none\ntwo\nlast"
