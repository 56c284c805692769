"""The VS Code extension: type-check and build with tsc, then its node tests (settings -> initialization options,
the inline-completion bridge, and the bridge against the real server over stdio)."""

from __future__ import annotations

import subprocess

from conftest import EDITORS, require_tool, which

VSCODE = EDITORS / "vscode"


def _run(args, env, timeout=300):
    return subprocess.run(args, cwd=VSCODE, env=env, capture_output=True, text=True, timeout=timeout)


def test_extension_typechecks_builds_and_its_tests_pass(client_env):
    require_tool(which("node"), "node")
    npm = require_tool(which("npm"), "npm")
    require_tool(VSCODE / "node_modules" / "typescript", "editors/vscode/node_modules (npm ci)")
    r = _run([npm, "run", "-s", "typecheck"], client_env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run([npm, "test"], client_env)  # TAP output when not on a terminal
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert "# pass 9" in r.stdout and "# fail 0" in r.stdout and "# skipped 0" in r.stdout, r.stdout[-3000:]
    assert (VSCODE / "out" / "src" / "extension.js").is_file()
