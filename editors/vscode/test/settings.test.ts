import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULTS, needsRestart, readSettings, serverCommand, SettingsError, toInitOptions } from '../src/settings';

const from = (values: Record<string, unknown>) => readSettings((k) => values[k]);

test('defaults give the server defaults, in lsp/config.py shape', () => {
  assert.deepEqual(toInitOptions(from({})), {
    engine: { backend: 'torch', model: 'house:target', draft: 'house:draft', speculation: 'draft',
              num_speculative_tokens: 'adaptive', device: 'auto' },
    maxTokens: 64, debounceMs: 30,
  });
  assert.deepEqual(serverCommand(from({})), { command: 'completer-lsp', args: ['--stdio'] });
});

test('user settings map field by field', () => {
  const s = from({ model: '/models/7b', draft: '', speculation: 'ngram', numSpeculativeTokens: '4', device: 'cuda:1',
                   backend: 'vllm', maxTokens: 32, debounceMs: 0, serverCommand: 'python -m lsp.server' });
  assert.deepEqual(toInitOptions(s), {
    engine: { backend: 'vllm', model: '/models/7b', draft: null, speculation: 'ngram', num_speculative_tokens: 4,
              device: 'cuda:1' },
    maxTokens: 32, debounceMs: 0,
  });
  assert.deepEqual(serverCommand(s), { command: 'python', args: ['-m', 'lsp.server', '--stdio'] });
  assert.deepEqual(serverCommand(from({ serverCommand: ['completer-lsp', '--ws', '127.0.0.1:9'] })).args,
                   ['--ws', '127.0.0.1:9']);
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
  ];
  for (const [values, message] of cases) {
    assert.throws(() => from(values), (e: unknown) => e instanceof SettingsError && message.test((e as Error).message),
                  JSON.stringify(values));
  }
  // Speculation without a draft is fine when it does not use one.
  assert.equal(toInitOptions(from({ draft: null, speculation: 'none' })).engine.draft, null);
});

test('only a new server command needs a restart', () => {
  assert.equal(needsRestart(DEFAULTS, { ...DEFAULTS, model: 'x' }), false);
  assert.equal(needsRestart(DEFAULTS, { ...DEFAULTS, serverCommand: ['other'] }), true);
});
