"""``make lab``: JupyterLab on the study notebooks, set up for a learner.

The environment holds nbgrader for the instructor's ``python -m grader grade``, which runs it
without JupyterLab. In the learner's lab its menus, sidebars and server extensions (formgrader,
assignment and course lists, validate) are instructor tools that do nothing useful, and they log
a warning about a missing nbgrader_config.py. The Jupyter config folder next to this file,
``lab_config/``, switches them off: it goes first on JUPYTER_CONFIG_PATH, which outranks both
~/.jupyter and the environment's own config, and neither of those is changed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from grader.core.catalog import NOTEBOOKS_DIR, REPO_ROOT

CONFIG_DIR = Path(__file__).resolve().with_name("lab_config")
# The URL Jupyter logs once it listens: "http://localhost:8888/lab/tree/notebooks?token=...".
_URL = re.compile(r"https?://\S+/lab\S*")


def command(jupyter_args: list[str]) -> list[str]:
    """The JupyterLab command line: rooted at the repository (so the tracks' kernel.py files can
    be opened too), opening the notebooks folder, with `jupyter_args` last so that they win."""
    notebooks = NOTEBOOKS_DIR.relative_to(REPO_ROOT).as_posix()
    args = [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={REPO_ROOT}",
        f"--LabApp.default_url=/lab/tree/{notebooks}",
    ]
    if os.geteuid() == 0:  # the usual user in a container; Jupyter refuses root without this flag
        args.append("--allow-root")
    return args + list(jupyter_args)


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(CONFIG_DIR), env.get("JUPYTER_CONFIG_PATH")]))
    return env


def run(jupyter_args: list[str]) -> int:
    """Run JupyterLab until it stops; echo its log and point out the URL to open."""
    # Only the log (stderr) passes through here, to spot the URL. stdout and stdin stay the
    # terminal's, so that Jupyter's own "Shut down this Jupyter server (y/[n])?" works on Ctrl-C.
    lab = subprocess.Popen(
        command(jupyter_args), env=environment(), stderr=subprocess.PIPE, text=True, errors="replace"
    )
    # Ctrl-C reaches Jupyter too (same process group): it decides when to stop, and this process
    # keeps echoing its log until it has. A stop request for this process is passed on.
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, lambda *_: None),
        signal.SIGTERM: signal.signal(signal.SIGTERM, lambda *_: lab.terminate()),
    }
    try:
        shown = False
        for line in lab.stderr:
            sys.stderr.write(line)
            sys.stderr.flush()
            url = _URL.search(line)
            if url and not shown:
                shown = True
                print(
                    f"\n    JupyterLab is running. Open this address in your browser:\n\n"
                    f"        {url.group(0)}\n\n    Stop it with Ctrl-C, twice.\n",
                    flush=True,
                )
        return lab.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
