// The bridge and the settings against the real server over stdio (vscode-jsonrpc, as vscode-languageclient uses).
// Env: COMPLETER_LSP_CMD (JSON argv), COMPLETER_ENGINE (JSON engine options: model, draft, device).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, ChildProcess } from 'node:child_process';
import * as rpc from 'vscode-jsonrpc/node';
import { InlineBridge, TriggerKind } from '../src/bridge';
import { connectTcp } from '../src/launch';
import { readSettings, serverCommand, toInitOptions } from '../src/settings';
import * as net from 'node:net';

const cmd = process.env.COMPLETER_LSP_CMD;
const engine = JSON.parse(process.env.COMPLETER_ENGINE ?? '{}');
let proc: ChildProcess;
let conn: rpc.MessageConnection;
const URI = 'file:///tmp/demo.py';

before(async () => {
  if (!cmd) return;
  const settings = readSettings((k) => ({ serverCommand: JSON.parse(cmd), model: engine.model, draft: engine.draft,
                                          device: engine.device ?? 'cpu', maxTokens: 12, debounceMs: 5 } as Record<string, unknown>)[k]);
  const { command, args } = serverCommand(settings);
  proc = spawn(command, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  conn = rpc.createMessageConnection(new rpc.StreamMessageReader(proc.stdout!), new rpc.StreamMessageWriter(proc.stdin!));
  conn.listen();
  await conn.sendRequest('initialize', { processId: process.pid, rootUri: null, capabilities: {},
                                         initializationOptions: toInitOptions(settings) });
  await conn.sendNotification('initialized', {});
  const end = Date.now() + 120000;
  for (;;) {
    const s = await conn.sendRequest('completer/stats', {}) as { engineReady: boolean; engineError: string | null };
    assert.equal(s.engineError, null);
    if (s.engineReady) break;
    assert.ok(Date.now() < end, 'engine did not load');
    await new Promise((r) => setTimeout(r, 100));
  }
  await conn.sendNotification('textDocument/didOpen', { textDocument: { uri: URI, languageId: 'python', version: 1,
                                                                         text: 'import math\n\n\ndef area(radius):\n    return ' } });
});

after(async () => {
  if (!conn) return;
  await conn.sendRequest('shutdown');
  await conn.sendNotification('exit');
  conn.dispose();
  proc.kill();
});

test('the real server answers the bridge with ghost text at the cursor', { skip: !cmd && 'COMPLETER_LSP_CMD not set' }, async () => {
  const b = new InlineBridge((p, token) => conn.sendRequest('textDocument/inlineCompletion', p, token as rpc.CancellationToken));
  const src = new rpc.CancellationTokenSource();
  const items = await b.provide(URI, { line: 4, character: 11 }, TriggerKind.Automatic, src.token);
  assert.equal(items.length, 1);
  assert.ok(items[0].text.length > 0);
  assert.deepEqual(items[0].range, { start: { line: 4, character: 11 }, end: { line: 4, character: 11 } });
  assert.ok(b.lastLatencyMs! > 0);
  assert.equal(b.errors, 0);
});

test('cancelling the token cancels the request on the server', { skip: !cmd && 'COMPLETER_LSP_CMD not set' }, async () => {
  await conn.sendNotification('workspace/didChangeConfiguration', { settings: { debounceMs: 2000 } });
  const before = await conn.sendRequest('completer/stats', {}) as { server: Record<string, number> };
  const b = new InlineBridge((p, token) => conn.sendRequest('textDocument/inlineCompletion', p, token as rpc.CancellationToken));
  const src = new rpc.CancellationTokenSource();
  // Another document: the same position in the first one would be answered from the server's cache.
  const uri2 = 'file:///tmp/other.py';
  await conn.sendNotification('textDocument/didOpen', { textDocument: { uri: uri2, languageId: 'python', version: 1,
                                                                         text: 'import os\nos.' } });
  const pending = b.provide(uri2, { line: 1, character: 3 }, TriggerKind.Automatic, src.token);
  setTimeout(() => src.cancel(), 100);
  assert.deepEqual(await pending, []);
  assert.equal(b.cancelled, 1);
  await conn.sendNotification('workspace/didChangeConfiguration', { settings: { debounceMs: 5 } });
  let after = before;
  for (let i = 0; i < 50 && after.server.requests_cancelled === before.server.requests_cancelled; i++) {
    await new Promise((r) => setTimeout(r, 50));
    after = await conn.sendRequest('completer/stats', {}) as { server: Record<string, number> };
  }
  assert.equal(after.server.requests_cancelled, before.server.requests_cancelled + 1);
});

test('--tcp HOST:PORT: the extension starts the server, connects, and a second client reuses it', { skip: !cmd && 'COMPLETER_LSP_CMD not set' }, async () => {
  const port = await new Promise<number>((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (probe.address() as net.AddressInfo).port;
      probe.close(() => resolve(p));
    });
  });
  // TCP clients may only name house:* models or the ones the operator lists with --model.
  const allowed = [engine.model, engine.draft].filter((m) => m && !m.startsWith('house:')).flatMap((m) => ['--model', m]);
  const settings = readSettings((k) => ({ serverCommand: [...JSON.parse(cmd!), '--tcp', `127.0.0.1:${port}`, ...allowed],
                                          model: engine.model, draft: engine.draft, device: engine.device ?? 'cpu' } as Record<string, unknown>)[k]);
  const { command, args, transport } = serverCommand(settings);
  assert.deepEqual(transport, { kind: 'tcp', host: '127.0.0.1', port });
  const first = await connectTcp(command, args, transport.host, port, () => {});
  assert.ok(first.started, 'nothing listened there: the server is started');
  try {
    const second = await connectTcp(command, args, transport.host, port, () => {});
    assert.equal(second.started, null, 'a listening server is connected to, not started again');
    const c = rpc.createMessageConnection(new rpc.SocketMessageReader(second.socket), new rpc.SocketMessageWriter(second.socket));
    c.listen();
    const init = await c.sendRequest('initialize', { processId: null, rootUri: null, capabilities: {},
                                                     initializationOptions: toInitOptions(settings) }) as { capabilities: Record<string, unknown> };
    assert.ok(init.capabilities.inlineCompletionProvider);
    await c.sendRequest('shutdown');
    c.dispose();
    second.socket.destroy();
    first.socket.destroy();
  } finally {
    first.started!.kill();
  }
});
