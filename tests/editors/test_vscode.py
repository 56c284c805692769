"""The VS Code extension: type-check and build with tsc, then its node tests (settings -> initialization options,
the inline-completion bridge, and the bridge against the real server over stdio)."""

from __future__ import annotations

import re
import subprocess

from tests.helpers.editor_tools import EDITORS, require_tool, which

VSCODE = EDITORS / "vscode"


def _run(args, env, timeout=300):
    try:
        return subprocess.run(args, cwd=VSCODE, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:   # say which node test was running (its output so far), not only "timed out"
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"{' '.join(map(str, args))} ran past {timeout} s; its output so far:\n{out[-6000:]}\n"
                             f"stderr:\n{err[-3000:]}") from None


def test_extension_typechecks_builds_and_its_tests_pass(client_env):
    require_tool(which("node"), "node")
    npm = require_tool(which("npm"), "npm")
    require_tool(VSCODE / "node_modules" / "typescript", "editors/vscode/node_modules (npm ci)")
    r = _run([npm, "run", "-s", "typecheck"], client_env)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run([npm, "test"], client_env)  # TAP output when not on a terminal
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    declared = sum(len(re.findall(r"^test\(", f.read_text(), re.M)) for f in (VSCODE / "test").glob("*.test.ts"))
    assert f"# pass {declared}" in r.stdout and "# fail 0" in r.stdout and "# skipped 0" in r.stdout, r.stdout[-3000:]
    assert (VSCODE / "out" / "src" / "extension.js").is_file()


def _ts_list(name: str) -> list[str]:
    """The string list ``export const NAME = [...]`` of src/settings.ts."""
    import re

    text = (VSCODE / "src" / "settings.ts").read_text()
    m = re.search(rf"export const {name}(?:: [^=]+)? = \[(.*?)\]", text, re.S)
    assert m, f"no {name} in settings.ts"
    return re.findall(r"'([^']*)'", m.group(1))


def test_editor_settings_match_the_servers_engine_settings():
    """Every speculation method and backend the server takes is offered (settings.ts and package.json), every
    EngineConfig field is reachable (its own setting or the completer.engine object), and nothing else is."""
    import dataclasses
    import json

    from completer.engine import config

    fields = [f.name for f in dataclasses.fields(config.EngineConfig)]
    assert _ts_list("SPECULATION") == list(config.SPECULATION)
    assert _ts_list("VLLM_ONLY_SPECULATION") == list(config.VLLM_ONLY_SPECULATION)
    assert _ts_list("BACKENDS") == list(config.BACKENDS)
    assert sorted(_ts_list("ENGINE_FIELDS")) == sorted(fields)
    props = json.loads((VSCODE / "package.json").read_text())["contributes"]["configuration"]["properties"]
    assert props["completer.speculation"]["enum"] == list(config.SPECULATION)
    assert props["completer.backend"]["enum"] == list(config.BACKENDS)
    defaults = {f.name: f.default for f in dataclasses.fields(config.EngineConfig)}
    own = {"backend": "backend", "model": "model", "draft": "draft", "drafter": "drafter",
           "speculation": "speculation", "numSpeculativeTokens": "num_speculative_tokens", "device": "device"}
    for setting, field in own.items():                     # the editor's defaults are the server's
        assert props[f"completer.{setting}"]["default"] == defaults[field], setting
    assert defaults["model"] == defaults["draft"] == config.DEFAULT and props["completer.drafter"]["default"] is None
    import re                                              # the drafter that ships per target, as the server's
    m = re.search(r"export const HOUSE_DRAFTERS[^=]*= \{(.*?)\};", (VSCODE / "src" / "settings.ts").read_text(), re.S)
    assert m and dict(re.findall(r"'([^']*)': '([^']*)'", m.group(1))) == config.HOUSE_DRAFTERS
    engine_doc = props["completer.engine"]["markdownDescription"]
    for field in set(fields) - set(own.values()):          # the rest documented under completer.engine
        assert f"`{field}`" in engine_doc, field


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
