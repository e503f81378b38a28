"""`make lab`: the learner's JupyterLab starts as root (the usual user in a container) and as a
plain user, serves the notebooks, leaves nbgrader's instructor tools out, and a real browser
renders a notebook in it.

One lab per user runs for the whole module (a module-scoped fixture); its time limits are hang
guards only.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("jupyterlab", reason="the lab needs the [notebooks] extra (jupyterlab)")

from grader.core.catalog import NOTEBOOKS_DIR
from grader.learn import lab as launcher

START_GUARD_S = 300  # hang guards only: a loaded machine is slow, never wrong
STOP_GUARD_S = 30
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
NOTEBOOKS = sorted(path.name for path in NOTEBOOKS_DIR.glob("*.ipynb"))


@dataclass
class Lab:
    base: str
    token: str
    port: int
    home: Path
    uid: int  # whom the lab must run as

    @property
    def log_path(self) -> Path:
        return self.home / "lab.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        request = urllib.request.Request(self.base + path, headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=START_GUARD_S) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _as_plain_user(home: Path) -> list[str]:
    """A command prefix that runs the lab as `nobody` (who then owns `home`), or a skip when this
    process cannot switch users."""
    if os.geteuid() != 0:
        pytest.skip(
            f"the tests run as uid {os.geteuid()}, not root, so they cannot switch users; "
            "the current-user run already is a non-root run"
        )
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("running the lab as another user needs setpriv (util-linux), which is not installed")
    try:
        user = pwd.getpwnam("nobody")
        uid, gid = user.pw_uid, user.pw_gid
    except KeyError:
        uid = gid = 65534
    for path in [home, *home.rglob("*")]:
        os.chown(path, uid, gid)
    prefix = [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    # A venv made from a Python under /root (pyenv, as in many containers) cannot even be
    # executed by another user. Reading and searching folders is then granted, nothing else:
    # the process is still not root to Jupyter, and still cannot write outside its HOME.
    needed = (Path(sys.executable).absolute(), Path(sys.executable).resolve(), Path(launcher.__file__))
    if any(not folder.stat().st_mode & 0o001 for path in needed for folder in path.parents):
        prefix += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    return prefix


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the whole group (launcher and Jupyter, which then stops its kernels), SIGKILL
    if it is still there after the guard."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(STOP_GUARD_S)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module", params=["current-user", "plain-user"])
def lab(request):
    home = Path(tempfile.mkdtemp(prefix="grader-lab-"))  # not pytest's tmp: that one is 0700
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    # Autosave off, so that a slow run cannot write the opened notebook back into the repository.
    settings = home / ".jupyter/lab/user-settings/@jupyterlab/docmanager-extension/plugin.jupyterlab-settings"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"autosave": False}))
    prefix = _as_plain_user(home) if request.param == "plain-user" else []
    env = {
        **os.environ,
        "HOME": str(home),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_CONFIG_DIR": str(home / ".jupyter"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    checkpoints = NOTEBOOKS_DIR / ".ipynb_checkpoints"  # the lab makes one on opening a notebook
    if not checkpoints.exists():
        request.addfinalizer(lambda: shutil.rmtree(checkpoints, ignore_errors=True))

    port = _free_port()
    server = Lab(f"http://127.0.0.1:{port}", secrets.token_hex(16), port, home, home.stat().st_uid)
    with open(server.log_path, "w") as log:
        process = subprocess.Popen(
            prefix
            + [
                sys.executable,
                "-m",
                "grader",
                "lab",
                "--",
                "--no-browser",
                f"--port={server.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={server.token}",
            ],
            cwd=home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # its own process group, so that _stop reaches every process
    request.addfinalizer(lambda: _stop(process))
    deadline = time.monotonic() + START_GUARD_S
    while True:
        if process.poll() is not None:
            pytest.fail(f"the lab exited with code {process.returncode}:\n{server.log()}")
        try:
            if server.get("/api/status")[0] == 200:
                return server
        except OSError:  # not listening yet
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"the lab did not answer within {START_GUARD_S} s:\n{server.log()}")
        time.sleep(0.5)


def test_allow_root_only_for_root(monkeypatch):
    monkeypatch.setattr(launcher.os, "geteuid", lambda: 0)
    assert "--allow-root" in launcher.command(["--port=9"])
    monkeypatch.setattr(launcher.os, "geteuid", lambda: 1000)
    assert "--allow-root" not in launcher.command(["--port=9"])
    assert launcher.command(["--port=9"])[-1] == "--port=9"  # the learner's own arguments win


def test_the_repository_config_goes_first(monkeypatch):
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "/elsewhere")
    assert launcher.environment()["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [str(launcher.CONFIG_DIR), "/elsewhere"]


def test_lab_serves_the_notebooks(lab):
    status, body = lab.get("/api/contents/notebooks")
    assert status == 200
    assert sorted(item["name"] for item in json.loads(body)["content"] if item["type"] == "notebook") == NOTEBOOKS
    assert lab.get("/lab")[0] == 200
    assert re.search(rf"JupyterLab is running\. .*\n\n +http://\S+:{lab.port}/lab/tree/notebooks\?token=", lab.log())


def test_lab_runs_as_the_intended_user(lab):
    """The server's own record of itself, in its runtime folder, belongs to the user it runs as."""
    records = list((lab.home / "runtime").glob("jpserver-*.json"))
    assert records and {record.stat().st_uid for record in records} == {lab.uid}


def test_nbgrader_is_off(lab):
    status, page = lab.get("/lab")
    assert status == 200, page[:500]
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
    assert found, f"the lab's page holds no jupyter-config-data; it begins: {page[:500]}"
    config = json.loads(found.group(1))
    disabled = config.get("disabledExtensions", [])
    frontend = [ext["name"] for ext in config["federated_extensions"] if "nbgrader" in ext["name"]]
    assert all(name in disabled for name in frontend), f"enabled in the lab: {frontend}, disabled: {disabled}"
    # Routes of the server extensions: formgrader; assignment and course lists (both serve this).
    assert lab.get("/formgrader/api/status")[0] == 404
    assert lab.get("/nbgrader_version")[0] == 404


def test_log_is_clean(lab):
    log = lab.log()
    for unwanted in ("No nbgrader_config.py", "Running as root", "nbgrader.server_extensions", "Traceback"):
        assert unwanted not in log, f"{unwanted!r} in the lab's log:\n{log}"


def test_a_browser_renders_a_notebook(lab, tmp_path):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("no browser test: the playwright package is not installed (pip install -e '.[dev]')")
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"no browser test: {CHROMIUM} is missing (apt-get install chromium)")
    notebook = NOTEBOOKS_DIR / "missing-elements-01-vector-add.ipynb"
    heading = json.loads(notebook.read_text())["cells"][0]["source"][0].lstrip("# ").strip()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{lab.base}/lab/tree/notebooks/{notebook.name}?token={lab.token}", timeout=START_GUARD_S * 1000)
            page.locator(".jp-RenderedMarkdown h1", has_text=heading).first.wait_for(timeout=START_GUARD_S * 1000)
            page.screenshot(path=tmp_path / "lab.png")
            # Plugins are active before a document opens, so nbgrader's would show by now.
            menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
            toolbar = page.locator(".jp-NotebookPanel-toolbar").first.inner_text()
            tabs = page.locator(".lm-TabBar-tab").evaluate_all("tabs => tabs.map(t => t.title || t.innerText)")
        finally:
            browser.close()
    assert "File" in menus and "Nbgrader" not in menus, menus
    assert "Validate" not in toolbar, toolbar
    assert tabs and not [tab for tab in tabs if "nbgrader" in tab.lower()], tabs
    assert (tmp_path / "lab.png").stat().st_size > 10_000
