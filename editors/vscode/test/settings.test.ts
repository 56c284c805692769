import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULTS, documentSelector, needsRestart, readSettings, serverCommand, SettingsError, toInitOptions } from '../src/settings';

const from = (values: Record<string, unknown>) => readSettings((k) => values[k]);

test('defaults give the server defaults, in lsp/config.py shape', () => {
  assert.deepEqual(toInitOptions(from({})), {
    engine: { backend: 'torch', model: 'house:target', draft: 'house:draft', speculation: 'draft',
              num_speculative_tokens: 'adaptive', device: 'auto' },
    maxTokens: 64, debounceMs: 30,
  });
  assert.deepEqual(serverCommand(from({})), { command: 'completer-lsp', args: [], transport: { kind: 'stdio' } });
  assert.ok(from({}).languages.includes('python') && !from({}).languages.includes('json'));
  assert.equal(from({}).completionList, false);
});

test('user settings map field by field', () => {
  const s = from({ model: '/models/7b', draft: '', speculation: 'ngram', numSpeculativeTokens: '4', device: 'cuda:1',
                   backend: 'vllm', maxTokens: 32, debounceMs: 0, serverCommand: 'python -m lsp.server' });
  assert.deepEqual(toInitOptions(s), {
    engine: { backend: 'vllm', model: '/models/7b', draft: null, speculation: 'ngram', num_speculative_tokens: 4,
              device: 'cuda:1' },
    maxTokens: 32, debounceMs: 0,
  });
  // The arguments go to the server as given: the client library must not add a second --stdio.
  assert.deepEqual(serverCommand(s), { command: 'python', args: ['-m', 'lsp.server'], transport: { kind: 'stdio' } });
  assert.deepEqual(serverCommand(from({ serverCommand: ['completer-lsp', '--stdio'] })).args, ['--stdio']);
});

test('--tcp names where to connect; --ws and a --tcp without a fixed port are refused with the forms that work', () => {
  assert.deepEqual(serverCommand(from({ serverCommand: ['completer-lsp', '--tcp', '127.0.0.1:9000'] })).transport,
                   { kind: 'tcp', host: '127.0.0.1', port: 9000 });
  assert.deepEqual(serverCommand(from({ serverCommand: ['completer-lsp', '--tcp=9001'] })).transport,
                   { kind: 'tcp', host: '127.0.0.1', port: 9001 });
  for (const cmd of [['completer-lsp', '--ws', '127.0.0.1:9'], ['completer-lsp', '--tcp', '127.0.0.1:0'],
                     ['completer-lsp', '--tcp']]) {
    assert.throws(() => serverCommand(from({ serverCommand: cmd })),
                  /completer\.serverCommand: .*use \["completer-lsp"\] \(stdio, the default\) or \["completer-lsp", "--tcp", "127\.0\.0\.1:PORT"\]/);
  }
});

test('bad settings are refused with the setting named', () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ speculation: 'fast' }, /completer\.speculation: expected one of none, draft, ngram, draft\+ngram/],
    [{ numSpeculativeTokens: 0 }, /completer\.numSpeculativeTokens/],
    [{ numSpeculativeTokens: 33 }, /completer\.numSpeculativeTokens/],
    [{ numSpeculativeTokens: 2.5 }, /completer\.numSpeculativeTokens/],
    [{ draft: null }, /completer\.draft: speculation "draft" needs a draft model/],
    [{ maxTokens: 0 }, /completer\.maxTokens/],
    [{ debounceMs: -1 }, /completer\.debounceMs/],
    [{ serverCommand: [] }, /completer\.serverCommand/],
    [{ backend: 'tgi' }, /completer\.backend/],
    [{ model: '' }, /completer\.model/],
    [{ languages: 'python' }, /completer\.languages: expected a list of language ids/],
    [{ completionList: 'yes' }, /completer\.completionList/],
  ];
  for (const [values, message] of cases) {
    assert.throws(() => from(values), (e: unknown) => e instanceof SettingsError && message.test((e as Error).message),
                  JSON.stringify(values));
  }
  // Speculation without a draft is fine when it does not use one.
  assert.equal(toInitOptions(from({ draft: null, speculation: 'none' })).engine.draft, null);
});

test('only a new server command, language list or completion-list choice needs a restart', () => {
  assert.equal(needsRestart(DEFAULTS, { ...DEFAULTS, model: 'x' }), false);
  assert.equal(needsRestart(DEFAULTS, { ...DEFAULTS, serverCommand: ['other'] }), true);
  assert.equal(needsRestart(DEFAULTS, { ...DEFAULTS, languages: ['python'] }), true);
  assert.equal(needsRestart(DEFAULTS, { ...DEFAULTS, completionList: true }), true);
});

test('the provider runs on code languages only by default, every file with ["*"]', () => {
  const sel = documentSelector(from({}));
  assert.ok(sel.some((f) => f.language === 'python' && f.scheme === 'file'));
  assert.ok(sel.some((f) => f.language === 'python' && f.scheme === 'untitled'));
  assert.ok(!sel.some((f) => ['json', 'jsonc', 'markdown', 'plaintext', undefined].includes(f.language)));
  assert.deepEqual(documentSelector(from({ languages: ['go'] })),
                   [{ scheme: 'file', language: 'go' }, { scheme: 'untitled', language: 'go' }]);
  assert.deepEqual(documentSelector(from({ languages: ['*'] })), [{ scheme: 'file' }, { scheme: 'untitled' }]);
});
