"""Through the real server: definitions of an imported name come from a workspace file that is not open (computed in
the background, then in the prompt), and a shown completion's outcome (the editor's completer/didAccept, the
document's later text) reaches completer/stats."""

from __future__ import annotations

import asyncio

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.e2e.conftest import SERVER, TEST_DEFAULTS
from tests.helpers.pygls_session import edit, init_params, inline_params, open_doc, stats, wait_engine_ready

HELPER = "def normalize_record(record, schema, strict=False):\n    return record\n"
MAIN = "from .helpers import normalize_record\n\n\ndef load(rows, schema):\n    out = []\n    for r in rows:\n        out.append(\n"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "helpers.py").write_text(HELPER)
    (root / "pkg" / "main.py").write_text(MAIN)
    return root


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER), scope="module")
async def ws_server(lsp_client: LanguageClient, engine_options, project):
    params = init_params(engine_options, **TEST_DEFAULTS)
    params.workspace_folders = [types.WorkspaceFolder(uri=project.as_uri(), name="ws")]
    await lsp_client.initialize_session(params)
    await wait_engine_ready(lsp_client)
    yield lsp_client
    await lsp_client.shutdown_session()


pytestmark = pytest.mark.asyncio(loop_scope="module")


async def prompt_at(client, uri, line, ch) -> dict:
    res = await client.protocol.send_request_async("completer/prompt", {
        "textDocument": {"uri": uri}, "position": {"line": line, "character": ch}})
    return res._asdict() if hasattr(res, "_asdict") else res


async def test_imported_definitions_from_an_unopened_workspace_file_reach_the_prompt(ws_server, project):
    uri = (project / "pkg" / "main.py").as_uri()
    open_doc(ws_server, uri, MAIN)
    line, ch = 6, len("        out.append(")
    for _ in range(100):                      # computed in the background after the open
        s = await stats(ws_server)
        if s["context"]["computations"]:
            break
        await asyncio.sleep(0.05)
    assert s["context"]["workspaceFolders"] == [str(project.resolve())]
    plan = await prompt_at(ws_server, uri, line, ch)
    assert "# from pkg/helpers.py:\n# def normalize_record(record, schema, strict=False):" in plan["context"]
    resolved = s["context"]["import_resolutions"]
    ws_server.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))            # a save resolves the imports again
    for _ in range(100):
        s = await stats(ws_server)
        if s["context"]["import_resolutions"] > resolved:
            break
        await asyncio.sleep(0.05)
    assert s["context"]["import_resolutions"] == resolved + 1
    ws_server.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"contextSources": []}))
    await stats(ws_server)
    assert "helpers.py" not in (await prompt_at(ws_server, uri, line, ch))["context"]
    ws_server.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"contextSources": ["imports", "similar", "edits"]}))


async def test_an_accept_the_editor_reports_is_counted_with_its_characters(ws_server, project):
    uri = (project / "pkg" / "other.py").as_uri()
    text = "import os\n\n\ndef main(path):\n    return os.path.join(path, 'data')\n\n\ndef size(path):\n    return os.\n"
    open_doc(ws_server, uri, text)
    line, ch = 8, len("    return os.")
    result = await ws_server.text_document_inline_completion_async(inline_params(uri, line, ch))
    items = result.items if result is not None else []
    if not items or not items[0].insert_text:
        pytest.skip("the model showed nothing here")           # nothing shown, nothing to accept
    ghost = items[0].insert_text
    first = ghost.split("\n")[0]
    edit(ws_server, uri, 2, (line, ch), (line, ch), first)   # the editor inserts it ...
    ws_server.protocol.notify("completer/didAccept", {"textDocument": {"uri": uri}, "text": first,
                                                      "kind": "full" if first == ghost else "line"})   # ... and says so
    s = await stats(ws_server)
    py = s["outcomes"]["python"]
    assert py["shown"] >= 1 and py["shown_chars"] >= len(ghost)
    assert py["accepted_full"] + py["accepted_partial"] == 1 and py["accepted_chars"] == len(first)
    assert py["reported"] == 1
    ws_server.protocol.notify("completer/didAccept", {"textDocument": {"uri": uri}, "text": 3, "kind": "full"})
    s = await stats(ws_server)                               # a bad report: ignored, the server keeps serving
    assert s["outcomes"]["python"]["accepted_chars"] == len(first)
