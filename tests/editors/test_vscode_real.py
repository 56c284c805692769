"""The VS Code extension inside a real VS Code: code-server (installed by editors/ci-setup.sh) with the packaged
.vsix, driven from headless Chromium by editors/vscode/test/real-vscode/drive.mjs, against the real server.

What a user sees: ghost text after typing in a ``.py`` file, Tab inserts exactly it, typing on cancels the request in
flight, no suggest widget from us by default (the server's log shows no ``textDocument/completion`` request), and a
bad setting gives one clear message. The server is found the way a user's would be: a bare ``completer-lsp`` in the
workspace's ``.venv/bin`` (VS Code does not see an activated venv's PATH). code-server and everything it started are
stopped by process group (the id of the process this test started) afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.editor_tools import EDITORS, require_tool, which

VSCODE = EDITORS / "vscode"
DRIVER = VSCODE / "test" / "real-vscode" / "drive.mjs"
CODE_SERVER_VERSION = "4.139.1"   # editors/ci-setup.sh


def code_server_prefix() -> Path:
    cache = Path(os.environ.get("COMPLETER_CI_CACHE", Path.home() / ".cache" / "completer-ci"))
    return cache / f"code-server-{CODE_SERVER_VERSION}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CodeServer:
    """code-server in its own process group; ``stop`` ends the group (the extension host and language server too)."""

    def __init__(self, exe: str, env: dict, data: Path, extensions: Path, log: Path):
        self.port = free_port()
        self.log = log
        self.proc = subprocess.Popen(
            [exe, "--auth", "none", "--bind-addr", f"127.0.0.1:{self.port}", "--user-data-dir", str(data),
             "--extensions-dir", str(extensions), "--disable-telemetry", "--disable-update-check",
             "--disable-workspace-trust", "--reconnection-grace-time", "5"],
            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"code-server exited: {log.read_text()[-3000:]}"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.3)
        raise AssertionError(f"code-server did not listen: {log.read_text()[-3000:]}")

    def stop(self) -> list[int]:
        """SIGTERM the group, SIGKILL what is left after 10 s; returns the pids still alive after that (none)."""
        pgid = self.proc.pid
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and group_members(pgid):
                time.sleep(0.2)
            if not group_members(pgid):
                break
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        return group_members(pgid)


def group_members(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


@pytest.fixture(scope="module")
def vscode_setup(tmp_path_factory, client_env):
    """code-server, node 24 and the packaged extension installed into a fresh extensions folder."""
    prefix = code_server_prefix()
    exe = require_tool(os.environ.get("COMPLETER_CODE_SERVER") or prefix / "node_modules" / ".bin" / "code-server",
                       "code-server (editors/ci-setup.sh installs it)")
    require_tool("/usr/bin/chromium", "chromium")
    node = require_tool(which("node"), "node")
    npm = require_tool(which("npm"), "npm")
    require_tool(VSCODE / "node_modules" / "playwright-core", "playwright-core (npm ci in editors/vscode)")
    require_tool(VSCODE / "node_modules" / "@vscode" / "vsce", "@vscode/vsce (npm ci in editors/vscode)")
    root = tmp_path_factory.mktemp("vscode-real")
    vsix = root / "completer.vsix"
    r = subprocess.run([npm, "run", "-s", "build"], cwd=VSCODE, env=client_env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = subprocess.run([str(VSCODE / "node_modules" / ".bin" / "vsce"), "package", "--skip-license", "-o", str(vsix)],
                       cwd=VSCODE, env=client_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # code-server needs Node 24 (its engines.node); ci-setup links the PyPI wheel's node here. The venv's bin is
    # left off PATH on purpose: the extension has to find the server in the workspace's venv.
    venv_bin = str(Path(sys.executable).parent)
    path = [str(prefix / "node24" / "bin")] + [p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin]
    env = dict(client_env, PATH=os.pathsep.join(path))
    env.pop("VIRTUAL_ENV", None)
    extensions = root / "extensions"
    r = subprocess.run([exe, "--extensions-dir", str(extensions), "--user-data-dir", str(root / "install-data"),
                        "--install-extension", str(vsix)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "was successfully installed" in r.stdout, r.stdout + r.stderr
    return {"exe": exe, "node": node, "env": env, "extensions": extensions, "root": root}


def workspace(root: Path, text: str) -> Path:
    """A project folder with demo.py and a .venv/bin/completer-lsp (this test's server, as pip would install it)."""
    ws = root / "project"
    (ws / ".venv" / "bin").mkdir(parents=True)
    (ws / "demo.py").write_text(text)
    launcher = ws / ".venv" / "bin" / "completer-lsp"
    # It records the arguments it is started with: the client library must not add its own (--stdio twice).
    launcher.write_text(f'#!/bin/sh\necho "$@" >> "{ws / "server-args.log"}"\nexec "{sys.executable}" -m lsp.server "$@"\n')
    launcher.chmod(0o755)
    return ws


def run_vscode(setup, name: str, settings: dict, ws: Path, drive: dict, tmp_path: Path) -> dict:
    data = tmp_path / f"{name}-data"
    (data / "User").mkdir(parents=True)
    # Written before code-server starts: edits while it runs are not picked up.
    (data / "User" / "settings.json").write_text(json.dumps({
        "workbench.startupEditor": "none", "security.workspace.trust.enabled": False,
        "telemetry.telemetryLevel": "off", "extensions.autoCheckUpdates": False, "update.mode": "none",
        "editor.wordBasedSuggestions": "off",   # so a suggest widget can only come from a completion provider
        "workbench.tips.enabled": False, "chat.disableAIFeatures": True,
        **settings}, indent=1))
    server = CodeServer(setup["exe"], setup["env"], data, setup["extensions"], tmp_path / f"{name}-code-server.log")
    try:
        args = {"url": f"http://127.0.0.1:{server.port}/?folder={ws}", "scenario": name,
                "shots": str(tmp_path), **drive}
        r = subprocess.run([setup["node"], str(DRIVER), json.dumps(args)], cwd=VSCODE, env=setup["env"],
                           capture_output=True, text=True, timeout=420)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        seen = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        left = server.stop()
    assert left == [], f"processes of code-server's group still alive after SIGKILL: {left}"
    channel = sorted(data.glob("logs/*/exthost*/output_logging_*/*completer*.log"))
    seen["outputChannel"] = "".join(f.read_text() for f in channel)   # the extension's "completer" output
    return seen


def inline_answers(log: str) -> list[dict]:
    """The inline completion results with items the server sent, in order, from its DEBUG log (pygls writes each
    message it sends as ``Sending data: {json}``)."""
    out = []
    for line in log.splitlines():
        _, sep, body = line.partition("Sending data: ")
        if not sep:
            continue
        try:
            msg = json.loads(body)
        except ValueError:
            continue
        res = msg.get("result") if isinstance(msg, dict) else None
        if isinstance(res, dict) and res.get("items") and "insertText" in res["items"][0]:
            out.append(res)
    return out


def test_ghost_text_tab_accepts_exactly_it_typing_cancels_and_no_suggest_list(vscode_setup, engine_options,
                                                                              tmp_path):
    before = "import math\n\n\ndef circle_area(radius):\n    "
    typed = "return"
    ws = workspace(tmp_path, before)
    server_log = tmp_path / "server.log"
    settings = {
        "completer.serverCommand": ["completer-lsp", "--log-file", str(server_log), "--log-level", "DEBUG"],
        "completer.model": engine_options["model"], "completer.draft": engine_options["draft"],
        "completer.device": engine_options.get("device", "cpu"), "completer.maxTokens": 16,
        # a request waits 300 ms before the engine, so the keys typed on (no pause between them) always find one
        # in flight to cancel; with 5 ms a warm server answered before the next key and nothing was cancelled
        "completer.debounceMs": 300,
        # the first chunk the model writes is already late: the server answers partially, the extension shows it
        # and asks again at once, and the whole ghost text replaces it (checked below from the server's log)
        "completer.partialAnswerMs": 1,
    }
    seen = run_vscode(vscode_setup, "ghost", settings, ws, {"file": "demo.py", "path": str(ws / "demo.py"), "typed": typed,
                                                       "typeOn": "\nx = 1"},
                      tmp_path)
    log = server_log.read_text() if server_log.exists() else ""
    assert seen.get("error") is None, seen
    assert seen["ghost"], f"no ghost text: {seen['steps']}"
    after_tab = seen["savedAfterTab"]
    # Tab inserted exactly the ghost text (the DOM draws a multi-line ghost without its line breaks).
    assert after_tab.startswith(before + typed)
    assert after_tab[len(before + typed):].replace("\n", "") == seen["ghostStill"], (after_tab, seen)
    # Ghost text only: the server's completion provider was not registered, so no list request and no widget.
    assert seen["suggestVisible"] is False, seen
    assert "Request 'textDocument/inlineCompletion' received" in log
    assert "Request 'textDocument/completion' received" not in log
    # Before the accept: a partial answer was sent, and the last answer with ghost text is a whole one, the one Tab
    # inserted (the extension asked again after the partial one and VS Code drew the rest)
    answers = inline_answers(log.split("Notification 'completer/didAccept' received")[0])
    assert any(a.get("partial") for a in answers), answers
    last = answers[-1]
    assert not last.get("partial") and last["items"][0]["insertText"].replace("\n", "") == seen["ghostStill"], \
        (answers[-3:], seen["ghostStill"])
    # The cursor, where the file opened and where the test clicked, was reported before the typing
    # (completer/didMoveCursor: the server prefills the prompt there).
    assert "Notification 'completer/didMoveCursor' received" in log.split("Request 'textDocument/inlineCompletion'")[0]
    # Typing on cancelled requests in flight ($/cancelRequest reached the server).
    assert "Notification '$/cancelRequest' received" in log
    assert not [n for n in seen["notifications"] if "completer" in n], seen["notifications"]
    # The server was found in the workspace's venv and started with the arguments as given (no extra --stdio).
    launcher = ws / ".venv" / "bin" / "completer-lsp"
    starts = [line for line in seen["outputChannel"].splitlines() if line.startswith("[completer] starting ")]
    assert starts == [f"[completer] starting {launcher} --log-file {server_log} --log-level DEBUG"] * 2, starts
    assert (ws / "server-args.log").read_text().splitlines() == [f"--log-file {server_log} --log-level DEBUG"] * 2
    # "completer: Restart server": the old server got shutdown and exit and ended by itself (no signal), a new one
    # started; nothing stray in the output channel.
    assert log.count("Request 'initialize' received") == 2
    assert log.count("Notification 'exit' received") == 1
    assert "exited with signal" not in seen["outputChannel"], seen["outputChannel"][-2000:]
    assert "true" not in [line.strip() for line in seen["outputChannel"].splitlines()]
    assert "[Error" not in seen["outputChannel"], seen["outputChannel"][-2000:]


def test_a_missing_server_gives_one_clear_message(vscode_setup, tmp_path):
    ws = workspace(tmp_path, "x = 1\n")
    missing = str(tmp_path / "nowhere" / "completer-lsp")
    seen = run_vscode(vscode_setup, "bad-setting", {"completer.serverCommand": [missing]}, ws, {}, tmp_path)
    assert seen.get("error") is None, seen
    ours = [n for n in seen["notifications"] if "completer" in n.lower()]
    assert len(ours) == 1, seen["notifications"]
    assert re.search(r"completer\.serverCommand: .*nowhere/completer-lsp is not an executable file\. "
                     r'Set "completer\.serverCommand" to its absolute path', ours[0]), ours[0]
