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
// A hang fails the test that hung, by name, instead of the whole run at the caller's timeout (CI once lost 300 s).
const TEST_TIMEOUT_MS = 90000;

/** SIGTERM, then SIGKILL if the process has not exited within `graceMs`; resolves when it is gone. */
function stop(p: ChildProcess, graceMs = 10000): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const force = setTimeout(() => p.kill('SIGKILL'), graceMs);
    p.once('exit', () => { clearTimeout(force); resolve(); });
    p.kill();
  });
}

function within<T>(ms: number, what: string, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([work, new Promise<T>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms / 1000} s`)), ms);
  })]).finally(() => clearTimeout(timer));
}

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
}, { timeout: 180000 });

after(async () => {
  if (!conn) return;
  try {
    await within(10000, 'shutdown', conn.sendRequest('shutdown'));
    await conn.sendNotification('exit');
  } finally {
    conn.dispose();
    await stop(proc);
  }
}, { timeout: 30000 });

test('the real server answers the bridge with ghost text at the cursor', { skip: !cmd && 'COMPLETER_LSP_CMD not set', timeout: TEST_TIMEOUT_MS }, async () => {
  const b = new InlineBridge((p, token) => conn.sendRequest('textDocument/inlineCompletion', p, token as rpc.CancellationToken));
  const src = new rpc.CancellationTokenSource();
  const items = await b.provide(URI, { line: 4, character: 11 }, TriggerKind.Automatic, src.token);
  assert.equal(items.length, 1);
  assert.ok(items[0].text.length > 0);
  assert.deepEqual(items[0].range, { start: { line: 4, character: 11 }, end: { line: 4, character: 11 } });
  assert.ok(b.lastLatencyMs! > 0);
  assert.equal(b.errors, 0);
});

test('cancelling the token cancels the request on the server', { skip: !cmd && 'COMPLETER_LSP_CMD not set', timeout: TEST_TIMEOUT_MS }, async () => {
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

test('--tcp HOST:PORT: the extension starts the server, connects, and a second client reuses it', { skip: !cmd && 'COMPLETER_LSP_CMD not set', timeout: TEST_TIMEOUT_MS }, async () => {
  const port = await new Promise<number>((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (probe.address() as net.AddressInfo).port;
      probe.close(() => resolve(p));
    });
  });
  // TCP clients may only name house:* models or the ones the operator lists with --model.
  const allowed = [engine.model, engine.draft].filter((m) => m && !m.startsWith('house:')).flatMap((m) => ['--allow-model', m]);
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
    await stop(first.started!);
  }
});
