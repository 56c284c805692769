"""The Monaco web page in headless Chromium (playwright-core) against a real ``completer-lsp --ws``: runs the
page's own test (editors/web/tests/ghost.test.mjs) with node's test runner. Screenshot: the test's tmp folder."""

from __future__ import annotations

import subprocess

from tests.helpers.editor_tools import EDITORS, require_tool, which

WEB = EDITORS / "web"


def test_web_page_ghost_text_in_chromium(client_env, tmp_path):
    node = require_tool(which("node"), "node")
    chromium = require_tool("/usr/bin/chromium", "chromium (apt-get install chromium)")
    require_tool(WEB / "node_modules" / "monaco-editor" / "min", "editors/web/node_modules (npm ci)")
    require_tool(WEB / "node_modules" / "playwright-core", "playwright-core (npm ci in editors/web)")
    env = dict(client_env, CHROMIUM=chromium, COMPLETER_TEST_OUTPUT=str(tmp_path))
    r = subprocess.run([node, "--test", "--test-reporter=spec", "tests/"], cwd=WEB, env=env,
                       capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert "pass 7" in r.stdout and "fail 0" in r.stdout, r.stdout[-3000:]
    assert (tmp_path / "ghost-text.png").stat().st_size > 1000


def test_serve_prints_the_language_servers_url_it_was_given():
    """serve.mjs advertised ws://127.0.0.1:8765 whatever port the language server listened on."""
    import socket

    node = require_tool(which("node"), "node")
    with socket.socket() as s:                    # a listener on some port: "the server"
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        for arg in (f"ws://127.0.0.1:{port}", str(port)):
            p = subprocess.Popen([node, "serve.mjs", "0", arg], cwd=WEB, stdout=subprocess.PIPE, text=True)
            try:
                first = p.stdout.readline()
            finally:
                p.kill()
                p.wait()
            assert f"?server=ws://127.0.0.1:{port}" in first and "8765" not in first, first
    p = subprocess.Popen([node, "serve.mjs", "0", str(port)], cwd=WEB, stdout=subprocess.PIPE, text=True)
    try:                                          # the port is closed now: it says so
        p.stdout.readline()
        assert p.stdout.readline().startswith(f"nothing listens at ws://127.0.0.1:{port} yet")
    finally:
        p.kill()
        p.wait()
