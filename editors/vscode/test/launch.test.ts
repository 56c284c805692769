// Finding the server as users expect (setting, workspace venv, PATH) and the one message when it is not there.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { resolveServer, ServerNotFound } from '../src/launch';

function exe(file: string): string {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, '#!/bin/sh\n');
  chmodSync(file, 0o755);
  return file;
}

test('a bare name: the workspace venv first (.venv, then venv), then PATH', () => {
  const root = mkdtempSync(path.join(tmpdir(), 'completer-launch-'));
  const ws = path.join(root, 'project');
  const onPath = exe(path.join(root, 'bin', 'completer-lsp'));
  mkdirSync(ws);
  assert.equal(resolveServer('completer-lsp', [ws], path.join(root, 'bin'), 'linux'), onPath);
  const inVenv = exe(path.join(ws, 'venv', 'bin', 'completer-lsp'));
  assert.equal(resolveServer('completer-lsp', [ws], path.join(root, 'bin'), 'linux'), inVenv);
  const inDotVenv = exe(path.join(ws, '.venv', 'bin', 'completer-lsp'));
  assert.equal(resolveServer('completer-lsp', [ws], path.join(root, 'bin'), 'linux'), inDotVenv);
});

test('a path is used as given (relative to the workspace); a file that is not executable does not count', () => {
  const ws = mkdtempSync(path.join(tmpdir(), 'completer-launch-'));
  const tool = exe(path.join(ws, 'tools', 'lsp'));
  assert.equal(resolveServer('tools/lsp', [ws], '', 'linux'), tool);
  assert.equal(resolveServer(tool, [], '', 'linux'), tool);
  writeFileSync(path.join(ws, 'plain'), 'x');
  assert.throws(() => resolveServer(path.join(ws, 'plain'), [ws], '', 'linux'),
                /completer\.serverCommand: .*plain is not an executable file\. Set "completer\.serverCommand"/);
});

test('not found: one message naming where it looked, the setting and the absolute-path form', () => {
  const ws = mkdtempSync(path.join(tmpdir(), 'completer-launch-'));
  assert.throws(() => resolveServer('completer-lsp', [ws], '/nonexistent', 'linux'), (e: unknown) => {
    assert.ok(e instanceof ServerNotFound);
    const m = (e as Error).message;
    assert.match(m, /cannot find the language server "completer-lsp"/);
    assert.ok(m.includes(path.join(ws, '.venv', 'bin')) && m.includes('PATH'), m);
    assert.ok(m.includes(`Set "completer.serverCommand" to its absolute path, e.g. ["${path.join(ws, '.venv', 'bin', 'completer-lsp')}"]`), m);
    return true;
  });
});
