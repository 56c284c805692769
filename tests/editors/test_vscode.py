"""The VS Code extension: type-check and build with tsc, then its node tests (settings -> initialization options,
the inline-completion bridge, and the bridge against the real server over stdio)."""

from __future__ import annotations

import subprocess

from tests.helpers.editor_tools import EDITORS, require_tool, which

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
    assert "# pass 16" in r.stdout and "# fail 0" in r.stdout and "# skipped 0" in r.stdout, r.stdout[-3000:]
    assert (VSCODE / "out" / "src" / "extension.js").is_file()


def test_extension_packages_as_vsix_offline(client_env):
    import zipfile

    npm = require_tool(which("npm"), "npm")
    require_tool(VSCODE / "node_modules" / "@vscode" / "vsce", "@vscode/vsce (npm ci in editors/vscode)")
    vsix = VSCODE / "out" / "completer.vsix"
    vsix.unlink(missing_ok=True)
    r = _run([npm, "run", "-s", "package"], client_env, timeout=200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    names = set(zipfile.ZipFile(vsix).namelist())
    assert "extension/out/src/extension.js" in names
    assert "extension/node_modules/vscode-languageclient/node.js" in names  # its runtime dependency is inside
    assert not any(n.startswith("extension/src/") or n.startswith("extension/out/test/") for n in names)
