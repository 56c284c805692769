"""The Neovim plugin in a real headless Neovim, driven over its RPC socket with real keystrokes
(``nvim --server SOCK --remote-send``, i.e. nvim_input), against the real server over stdio."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers.editor_tools import EDITORS, SERVER_CMD, require_tool, which

INIT = EDITORS / "nvim" / "tests" / "minimal_init.lua"


class Nvim:
    def __init__(self, nvim: str, sock: Path, proc: subprocess.Popen):
        self.nvim, self.sock, self.proc = nvim, sock, proc

    def _remote(self, *args: str) -> str:
        r = subprocess.run([self.nvim, "--headless", "--clean", "--server", str(self.sock), *args],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def keys(self, keys: str) -> None:
        """Keystrokes, as a user types them (nvim_input)."""
        self._remote("--remote-send", keys)

    def lua(self, expr: str):
        """Value of a Lua expression inside the editor, through JSON."""
        code = f"vim.json.encode({{v = {expr}}})".replace("\\", "\\\\").replace('"', '\\"')
        out = self._remote("--remote-expr", f'luaeval("{code}")')
        v = json.loads(out)
        return v.get("v") if isinstance(v, dict) else None  # {v = nil} encodes as []

    def wait(self, expr: str, timeout: float = 60.0, what: str = ""):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = self.lua(expr)
            if v:
                return v
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what or expr}; state: {self.lua('require[[completer]].state')}")

    def line(self) -> str:
        return self.lua("vim.api.nvim_get_current_line()")


TEXT = ["import math", "", "", "def area(radius):", "    "]


@pytest.fixture(scope="module")
def editor(tmp_path_factory, client_env):
    """One Neovim (and one server) for the module: loading the engine is the slow part."""
    tmp_path = tmp_path_factory.mktemp("nvim")
    exe = require_tool(which("nvim"), "nvim (>= 0.10)")
    sock = tmp_path / "nvim.sock"
    src = tmp_path / "demo.py"
    src.write_text("\n".join(TEXT) + "\n")
    env = dict(client_env)
    env["COMPLETER_NVIM_CONFIG"] = json.dumps({
        "cmd": SERVER_CMD,
        "init_options": {"engine": json.loads(env["COMPLETER_ENGINE"]), "maxTokens": 12, "debounceMs": 5},
    })
    proc = subprocess.Popen([exe, "--headless", "--clean", "-u", str(INIT), "--listen", str(sock), str(src)],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=tmp_path)
    end = time.monotonic() + 20
    while not sock.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < end, "nvim did not open its socket"
        time.sleep(0.05)
    n = Nvim(exe, sock, proc)
    n.wait("(function() local s = require[[completer]].stats(0) return s and s.engineReady end)()", 120,
           "the server's engine to load")
    yield n
    try:
        n.keys("<Esc>:qa!<CR>")
        proc.wait(timeout=10)
    except Exception:
        proc.kill()
        proc.wait()


@pytest.fixture
def nvim(editor):
    """The editor in normal mode with the starting text (the server sees the edit like any other)."""
    editor.keys("<Esc>")
    editor.lua(f"vim.api.nvim_buf_set_lines(0, 0, -1, false, vim.json.decode({json.dumps(json.dumps(TEXT))}))")
    editor.wait("require[[completer]].state.pending == nil and require[[completer]].ghost_text() == nil")
    return editor


GHOST = "require[[completer]].ghost_text()"


def test_version_has_the_apis(nvim):
    assert nvim.lua("vim.fn.has('nvim-0.10')") == 1


def test_ghost_text_is_grey_in_a_256_colour_terminal_too(nvim):
    """CompleterGhost has a cterm grey (Neovim's default Comment has only a GUI colour: without termguicolors a
    link to it drew ghost text like real code), keeps it after :colorscheme, and a user's own definition wins."""
    nvim.lua("vim.cmd('set notermguicolors')")
    hl = nvim.lua("vim.api.nvim_get_hl(0, {name = 'CompleterGhost', link = false})")
    assert hl.get("ctermfg") == 244 and hl.get("fg"), hl
    nvim.lua("vim.cmd('colorscheme default')")
    assert nvim.lua("vim.api.nvim_get_hl(0, {name = 'CompleterGhost', link = false})").get("ctermfg") == 244
    nvim.lua("vim.api.nvim_set_hl(0, 'CompleterGhost', {ctermfg = 33})")
    nvim.lua("require[[completer]].define_highlight()")
    assert nvim.lua("vim.api.nvim_get_hl(0, {name = 'CompleterGhost', link = false})").get("ctermfg") == 33
    nvim.lua("vim.cmd('colorscheme default')")


def test_ghost_text_appears_and_tab_inserts_it(nvim):
    nvim.keys("5GAreturn math.")
    before = nvim.line()
    assert before == "    return math."
    # the whole answer: a partial one (partialAnswerMs, when the model is slower than that) is asked again at once
    nvim.wait(f"{GHOST} ~= nil and require[[completer]].state.pending == nil", what="ghost text")
    ghost = nvim.lua(GHOST)
    assert isinstance(ghost, str) and ghost
    # The ghost text is an extmark at the cursor, in the buffer the user is typing in; the text is not inserted.
    marks = nvim.lua("vim.api.nvim_buf_get_extmarks(0, vim.api.nvim_create_namespace('completer'), 0, -1, "
                     "{details = true})")
    assert len(marks) == 1
    _, row, col, details = marks[0]
    assert (row, col) == (4, len(before))
    assert details["virt_text"][0] == [ghost.split("\n")[0], "CompleterGhost"]
    assert details["virt_text_pos"] == "inline"
    assert nvim.line() == before
    assert nvim.lua("require[[completer]].state.last_latency_ms") > 0

    nvim.keys("<Tab>")
    # (After the insert the plugin asks again, so a new ghost may already be showing further on.)
    nvim.wait(f"vim.api.nvim_buf_get_lines(0, 0, -1, false)[5] ~= {json.dumps(before)}",
              what="the ghost text to be inserted")
    lines = nvim.lua("vim.api.nvim_buf_get_lines(0, 0, -1, false)")
    inserted = "\n".join(lines[4:])
    assert inserted.startswith(before + ghost), (inserted, ghost)
    first, *rest = ghost.split("\n")
    assert lines[4] == before + first
    cursor = nvim.lua("vim.api.nvim_win_get_cursor(0)")
    assert cursor == [5 + len(rest), len((rest[-1] if rest else before + first).encode())]
    later = nvim.lua("require[[completer]].state.ghost")
    if later:  # a next ghost sits at the new cursor, not where the accepted one was
        assert [later["row"] + 1, later["col"]] == cursor
    assert nvim.lua("vim.fn.mode()") == "i"
    # the plugin told the server (completer/didAccept): its stats count the accept and its characters
    outcomes = nvim.lua("vim.lsp.get_clients({name = 'completer'})[1]:request_sync('completer/stats', {}, 10000, 0)"
                        ".result.outcomes.python")
    assert outcomes["reported"] == 1 and outcomes["accepted_full"] == 1, outcomes
    assert outcomes["accepted_chars"] == len(ghost), (outcomes, ghost)


def test_a_partial_answer_is_shown_then_the_rest(nvim):
    """partialAnswerMs 1: the server answers with the model's first chunk (the plugin declares partialGhost), the
    plugin shows it and asks again at once, and the whole ghost text, which extends it, replaces it."""
    configure = ("vim.lsp.get_clients({name = 'completer'})[1]:notify('workspace/didChangeConfiguration', "
                 "{settings = {partialAnswerMs = %d, maxTokens = %d}})")
    nvim.lua(configure % (1, 24))
    try:
        partials = nvim.lua("require[[completer]].state.partial_answers")
        server = nvim.lua("require[[completer]].stats(0).server.partial_answers")
        nvim.keys("5GAresult = math.")
        nvim.wait(f"require[[completer]].state.partial_answers > {partials} and {GHOST} ~= nil "
                  "and require[[completer]].state.pending == nil", what="a partial answer, then the whole one")
        part, whole = nvim.lua("require[[completer]].state.last_partial"), nvim.lua(GHOST)
        assert part and whole.startswith(part), (part, whole)
        assert nvim.lua("require[[completer]].stats(0).server.partial_answers") > server
        assert nvim.line() == "    result = math."
    finally:
        nvim.lua(configure % (30, 12))


def test_a_cursor_moved_without_typing_is_reported_and_warms_the_prompt(nvim):
    """completer/didMoveCursor: a cursor moved in normal mode (no edit) is reported once it rests, and the server
    prefills the prompt there (its warm-ups); typing moves are not reported."""
    reports = nvim.lua("require[[completer]].state.cursor_reports")
    warmups = nvim.lua("require[[completer]].stats(0).server.warmups")
    nvim.keys("4G$")
    nvim.wait(f"require[[completer]].state.cursor_reports > {reports}", what="a cursor report")
    nvim.wait(f"require[[completer]].stats(0).server.warmups > {warmups}", what="the server's warm-up")
    nvim.keys("5GA")
    nvim.wait(f"require[[completer]].state.cursor_reports > {reports + 1}", what="the report of the move to line 5")
    time.sleep(0.3)                    # the moves' reports have all come (a slow machine may split 5G and A)
    settled = nvim.lua("require[[completer]].state.cursor_reports")
    nvim.keys("x = 1")
    nvim.wait("require[[completer]].state.pending == nil")
    time.sleep(0.3)
    assert nvim.lua("require[[completer]].state.cursor_reports") == settled     # typing is not reported


def test_typing_cancels_and_dismiss_clears(nvim):
    # A long server-side debounce keeps the first request in flight while the next key is typed. A fixed one:
    # the adaptive debounce (on by default) follows the rhythm learned from the earlier tests' fast typing instead
    # of debounceMs, and answered this key in ~50 ms now and then, before the next key came.
    debounce = ("vim.lsp.get_clients({name = 'completer'})[1]:notify('workspace/didChangeConfiguration', "
                "{settings = {debounceMs = %d, adaptiveDebounce = %s}})")
    nvim.lua(debounce % (1500, "false"))
    nvim.keys("5GAr")
    nvim.wait("require[[completer]].state.pending ~= nil", what="a request in flight")
    cancelled = nvim.lua("require[[completer]].state.cancelled")
    # Typing again before an answer: the request in flight is cancelled ($/cancelRequest) and superseded.
    nvim.keys("e")
    assert nvim.lua("require[[completer]].state.cancelled") == cancelled + 1
    nvim.lua(debounce % (5, "true"))
    nvim.keys("t")
    nvim.wait(GHOST, what="ghost text after typing")
    assert nvim.line() == "    ret"
    # A keystroke replaces the ghost: the old extmark goes, a new answer is drawn at the new cursor.
    old = nvim.lua("require[[completer]].state.ghost.tick")
    nvim.keys("u")
    assert nvim.line() == "    retu"
    nvim.wait(f"(function() local g = require[[completer]].state.ghost "
              f"return g ~= nil and g.col == 8 and g.tick ~= {old} end)()", what="a new ghost at the new cursor")
    assert nvim.lua("#vim.api.nvim_buf_get_extmarks(0, vim.api.nvim_create_namespace('completer'), 0, -1, {})") == 1
    # Dismiss clears it and leaves the text as typed; the key inserts nothing and no new request follows.
    asked = nvim.lua("require[[completer]].state.requests")
    nvim.keys("<C-]>")
    assert nvim.lua(GHOST) is None
    time.sleep(0.5)
    assert nvim.lua(GHOST) is None
    assert nvim.line() == "    retu"
    assert nvim.lua("require[[completer]].state.requests") == asked
    assert nvim.lua("#vim.api.nvim_buf_get_extmarks(0, vim.api.nvim_create_namespace('completer'), 0, -1, {})") == 0
    assert nvim.lua("vim.fn.mode()") == "i"
    stats = nvim.lua("require[[completer]].stats(0).server")
    assert stats["requests_received"] >= 3
    assert stats["requests_cancelled"] + stats["requests_superseded"] >= 1


def test_visible_text_strips_what_was_typed(editor):
    """An item whose range starts before the cursor shows only the rest; one that does not fit shows nothing."""
    def vis(item, line, col):
        return editor.lua(f"require[[completer]].visible_text(vim.json.decode({json.dumps(json.dumps(item))}), "
                          f"{json.dumps(line, ensure_ascii=False)}, 0, {col}, 'utf-16')")
    at = lambda c: {"line": 0, "character": c}  # noqa: E731
    assert vis({"insertText": "(radius)"}, "x = f", 5) == "(radius)"
    assert vis({"insertText": "return x", "range": {"start": at(4), "end": at(7)}}, "    ret", 7) == "urn x"
    assert vis({"insertText": {"kind": "snippet", "value": "abc"}, "range": {"start": at(1), "end": at(1)}},
               "x", 1) == "abc"
    assert vis({"insertText": "print", "range": {"start": at(4), "end": at(7)}}, "    ret", 7) is None
    assert vis({"insertText": "ret", "range": {"start": at(4), "end": at(7)}}, "    ret", 7) is None
    # UTF-16 range start after a non-ASCII character (é: 1 UTF-16 unit, 2 bytes).
    assert vis({"insertText": "lan", "range": {"start": at(1), "end": at(3)}}, "éla", 4) == "n"


def test_status_is_words_and_rounded_numbers(nvim):
    """:CompleterStatus printed the server's counters as raw JSON with 15-digit floats."""
    nvim.keys("5GAreturn ")
    nvim.wait(GHOST, what="ghost text")
    text = nvim.lua("require[[completer]].status_text(require[[completer]].stats(0))")
    lines = text.split("\n")
    assert lines[0].startswith("completer: ") and lines[1].startswith("server: ")
    assert lines[2].startswith("last request: ") and lines[3].startswith("engine: ready, model ")
    assert "{" not in text and '"' not in text
    assert not re.search(r"\d+\.\d{2,}", text), text      # at most one decimal
    shown = nvim.lua("vim.api.nvim_exec2('CompleterStatus', {output = true}).output")
    assert shown.split("\n")[0].startswith("completer: ") and "engine: ready" in shown


def test_a_server_warning_is_a_warning_in_lsplog(nvim):
    """The server's log reaches Neovim as window/logMessage with its level; on stderr every line of it was filed
    as [ERROR] in :LspLog."""
    path = nvim.lua("vim.lsp.get_log_path()")
    start = Path(path).stat().st_size if Path(path).exists() else 0     # the log is shared: only what follows
    nvim.lua("vim.lsp.get_clients({name = 'completer'})[1]:notify('workspace/didChangeConfiguration', "
             "{settings = {maxTokens = 'lots'}})")
    nvim.wait(f"(function() local f = io.open({json.dumps(path)}) if not f then return false end "
              f"f:seek('set', {start}) local t = f:read('*a') f:close() "
              "return t:find('settings not applied', 1, true) ~= nil end)()",
              what="the warning in the LSP log")
    with open(path, "rb") as f:
        f.seek(start)
        new_lines = f.read().decode(errors="replace").splitlines()
    lines = [line for line in new_lines if "settings not applied" in line]
    assert lines and all(line.startswith("[WARN]") for line in lines), lines
    assert not any("stderr" in line for line in lines), lines
    nvim.lua("vim.lsp.get_clients({name = 'completer'})[1]:notify('workspace/didChangeConfiguration', "
             "{settings = {maxTokens = 12}})")
