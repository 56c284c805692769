"""Exposure policy: plain functions, then a real ``completer-lsp --ws`` / ``--stdio`` process."""

from __future__ import annotations

import asyncio
import subprocess
from argparse import Namespace

import pytest
import pytest_asyncio
from websockets.exceptions import InvalidStatus

from lsp.client import Server, frame, open_ws, server_command
from lsp import security
from lsp.security import FrameLimitReader, Policy


# --- plain functions ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("host,loop", [("127.0.0.1", True), ("127.3.4.5", True), ("::1", True), ("[::1]", True),
                                       ("localhost", True), ("0.0.0.0", False), ("", False), ("::", False),
                                       ("192.168.1.10", False), ("example.com", False)])
def test_loopback(host, loop):
    assert security.is_loopback(host) is loop
    if loop:
        security.check_bind(host, None)
    else:
        with pytest.raises(security.SecurityError, match="--ws-token"):
            security.check_bind(host, None)
        security.check_bind(host, "t0ken")


@pytest.mark.parametrize("origin,ok", [(None, True), ("http://localhost:5173", True), ("http://127.0.0.1:80", True),
                                       ("vscode-webview://abc123", True), ("https://evil.example", False),
                                       ("http://localhost.evil.example:80", False), ("null", False),
                                       ("http://127.0.0.1.evil:1", False)])
def test_origin_allowlist(origin, ok):
    assert security.origin_allowed(origin, security.DEFAULT_ORIGINS) is ok


def test_token_sources_and_compare():
    assert security.token_from({"Authorization": "Bearer abc"}, "/") == "abc"
    assert security.token_from({}, "/?token=xyz&a=1") == "xyz"
    assert security.token_from({"Authorization": "Basic abc"}, "/") is None
    assert security.token_ok("abc", "abc") and not security.token_ok("abd", "abc")
    assert not security.token_ok(None, "abc") and not security.token_ok("\ud800", "abc")


def test_model_allowlist(tmp_path):
    inside = tmp_path / "models" / "m"
    inside.mkdir(parents=True)
    (tmp_path / "models" / "link").symlink_to("/etc")
    p = Policy(allow_client_models=False, server_models=frozenset({"/srv/named"}), model_dirs=(tmp_path / "models",))
    assert security.model_allowed("house:target", p) and security.model_allowed("/srv/named", p)
    assert security.model_allowed(str(inside), p)
    assert not security.model_allowed("/etc", p)
    assert not security.model_allowed(str(tmp_path / "models" / "link"), p)        # symlink out of the folder
    assert not security.model_allowed(str(tmp_path / "models" / ".." / "x"), p)
    assert not security.model_allowed("some/relative", p) and not security.model_allowed("org/hub-model", p)
    cfg = Namespace(model="/etc", draft="house:draft")
    with pytest.raises(security.SecurityError, match="model '/etc' is not allowed"):
        security.check_models(cfg, p)
    security.check_models(cfg, Policy(allow_client_models=True))
    args = Namespace(ws_token=None, allow_origin=None, max_message_bytes=10, model=["/a"], allow_model_dir=None,
                     allow_client_models=False)
    assert Policy.from_args(args, "stdio").allow_client_models
    assert not Policy.from_args(args, "ws").allow_client_models


async def test_frame_limit_reader_skips_oversized_frames():
    r = asyncio.StreamReader()
    small = frame(b'{"a": 1}')
    r.feed_data(frame(b"x" * 5000) + small + frame(b"y" * 300_000, b"Content-Type: a\r\n") + small)
    r.feed_eof()
    seen = []
    fr = FrameLimitReader(r, 100, seen.append)
    for _ in range(2):                         # what pygls' run_async does: headers, then the body
        assert (await fr.readline()).startswith(b"Content-Length")
        while await fr.readline() != b"\r\n":
            pass
        assert await fr.readexactly(5000 if not seen else 300_000) == b'{"a": 1}'
    assert seen == [5000, 300_000] and fr.skipped == 2


async def test_frame_limit_reader_bounds_header_lines():
    r = asyncio.StreamReader(limit=1024)
    r.feed_data(b"A" * 5000 + b"\r\n" + frame(b'{"b": 2}'))
    r.feed_eof()
    fr = FrameLimitReader(r, 100, lambda n: None)
    assert (await fr.readline()).startswith(b"X-Completer-Dropped")   # the long line, dropped
    assert (await fr.readline()).startswith(b"Content-Length")


async def test_stdio_long_header_line_is_ignored(tmp_path):
    server = Server("stdio", log_path=tmp_path / "stdio.log")
    c = await server.start()
    try:
        await c.send_bytes(b"X" * 100_000 + b"\r\n")
        assert (await c.health())["ok"] is not None
    finally:
        await server.stop(c)


# --- a real server ----------------------------------------------------------------------------------------------
@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def ws_server(tmp_path_factory, tiny_pair):
    s = Server("ws", args=("--allow-model-dir", str(tiny_pair[0].parent), "--max-message-bytes", "100000"),
               log_path=tmp_path_factory.mktemp("ws") / "server.log")
    await s.launch()
    yield s
    await s.stop()


async def expect_refused(server: Server, **kw) -> None:
    with pytest.raises(InvalidStatus) as e:
        await server.start(**kw)
    assert e.value.response.status_code == 403


async def health_on(server: Server, url: str | None = None, **kw) -> dict:
    """A new connection's ``completer/health`` answer (the whole response)."""
    c = await (open_ws(url, **kw) if url else server.start(**kw))
    try:
        return await c.ask("completer/health", {})
    finally:
        await c.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_origin_checked_at_handshake(ws_server):
    await expect_refused(ws_server, origin="https://evil.example")
    await expect_refused(ws_server, origin="http://localhost.evil.example:8080")
    for origin in (None, "http://localhost:3000", "vscode-webview://0a1b2c"):
        assert (await health_on(ws_server, origin=origin))["result"]["ok"] is not None


@pytest.mark.asyncio(loop_scope="module")
async def test_client_models_limited_to_allowlist(ws_server, engine_options, tmp_path):
    c = await ws_server.start()
    r = await c.initialize({**engine_options, "model": "/etc"})
    assert r["error"]["code"] == -32602 and "not allowed" in r["error"]["message"], r
    r = await c.initialize({**engine_options, "draft": str(tmp_path)})
    assert r["error"]["code"] == -32602 and "draft" in r["error"]["message"], r
    r = await c.initialize(engine_options)        # under --allow-model-dir: accepted
    assert "result" in r, r
    await c.wait_ready()
    await c.close()


@pytest.mark.asyncio(loop_scope="module")
async def test_message_size_limit_closes_only_that_connection(ws_server):
    c = await ws_server.start()
    await c.send({"jsonrpc": "2.0", "method": "x/big", "params": {"blob": "z" * 200_000}})
    await c.wait_closed(10)                            # the server closes the connection
    assert c.transport.close_code == 1009              # "message too big"
    assert "result" in await health_on(ws_server)      # the server keeps serving


async def test_token_required_when_set(tiny_pair, tmp_path):
    s = Server("ws", args=("--ws-token", "s3cret"), log_path=tmp_path / "tok.log")
    try:
        await s.launch()
        await expect_refused(s)
        await expect_refused(s, additional_headers={"Authorization": "Bearer wrong"})
        assert "result" in await health_on(s, additional_headers={"Authorization": "Bearer s3cret"})
        assert "result" in await health_on(s, s.url + "/?token=s3cret")
    finally:
        await s.stop()


def test_non_loopback_bind_needs_a_token():
    cmd = [a if a != "127.0.0.1:0" else "0.0.0.0:0" for a in server_command("ws")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert p.returncode != 0 and "--ws-token" in p.stderr, p.stderr[-2000:]


async def test_stdio_oversized_frame_is_refused_and_serving_goes_on(tmp_path):
    server = Server("stdio", args=("--max-message-bytes", "4096"), log_path=tmp_path / "stdio.log")
    c = await server.start()
    try:
        start = c.mark()
        await c.send_bytes(frame({"jsonrpc": "2.0", "id": 5, "method": "x", "params": "a" * 10_000}))
        assert (await c.health())["ok"] is not None
        errs = [m for m in c.since(start) if "error" in m]
        assert len(errs) == 1 and errs[0]["error"]["code"] == -32600 and "4096" in errs[0]["error"]["message"]
    finally:
        await server.stop(c)
