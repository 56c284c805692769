import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULTS, documentSelector, needsRestart, readSettings, serverCommand, SettingsError, toInitOptions } from '../src/settings';

const from = (values: Record<string, unknown>) => readSettings((k) => values[k]);

test('defaults give the server defaults, in lsp/config.py shape', () => {
  assert.deepEqual(toInitOptions(from({})), {
    engine: { backend: 'torch', model: 'default', draft: 'default', speculation: 'auto',
              num_speculative_tokens: 'adaptive', device: 'auto' },
    maxTokens: 32, debounceMs: 0, partialAnswerMs: 30, warmOnCursor: true,
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
    maxTokens: 32, debounceMs: 0, partialAnswerMs: 30, warmOnCursor: true,
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
    [{ speculation: 'fast' }, /completer\.speculation: expected one of auto, none, draft, ngram, draft\+ngram, eagle3, dflash, ngram_gpu, suffix/],
    [{ numSpeculativeTokens: 0 }, /completer\.numSpeculativeTokens/],
    [{ numSpeculativeTokens: 33 }, /completer\.numSpeculativeTokens/],
    [{ numSpeculativeTokens: 2.5 }, /completer\.numSpeculativeTokens/],
    [{ draft: null, speculation: 'draft' }, /completer\.draft: speculation "draft" needs a draft model/],
    [{ maxTokens: 0 }, /completer\.maxTokens/],
    [{ debounceMs: -1 }, /completer\.debounceMs/],
    [{ partialAnswerMs: 'soon' }, /completer\.partialAnswerMs/],
    [{ warmOnCursor: 'yes' }, /completer\.warmOnCursor/],
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

test('vLLM speculation (eagle3 with its drafter, ngram_gpu) and the engine object reach the server', () => {
  const e = toInitOptions(from({ backend: 'vllm', speculation: 'eagle3', drafter: '/d/eagle3', numSpeculativeTokens: 3,
                                 engine: { quantization: 'fp8', draft_quantization: 'fp8', tensor_parallel_size: 2 } }));
  assert.deepEqual(e.engine, { quantization: 'fp8', draft_quantization: 'fp8', tensor_parallel_size: 2, backend: 'vllm',
                               model: 'default', draft: 'default', drafter: '/d/eagle3', speculation: 'eagle3',
                               num_speculative_tokens: 3, device: 'auto' });
  assert.equal(toInitOptions(from({ backend: 'vllm', speculation: 'ngram_gpu' })).engine.speculation, 'ngram_gpu');
  assert.equal(toInitOptions(from({ backend: 'vllm', speculation: 'dflash', drafter: '/d/dflash' })).engine.drafter,
               '/d/dflash');
  assert.equal(toInitOptions(from({ speculation: 'draft' })).engine.drafter, undefined);   // sent only for eagle3
  // house v1 with no drafter set: nothing sent, the server takes the one that ships for it (house:eagle3)
  const v1 = toInitOptions(from({ backend: 'vllm', speculation: 'eagle3', model: 'house:target', draft: 'house:draft' }));
  assert.equal(v1.engine.drafter, undefined);
  assert.equal(v1.engine.model, 'house:target');
  // the default model (vLLM's: house v2) likewise (house:v2/eagle3)
  const v2 = toInitOptions(from({ backend: 'vllm', speculation: 'eagle3', drafter: null }));
  assert.equal(v2.engine.drafter, undefined);
  assert.equal(v2.engine.model, 'default');
  assert.deepEqual(toInitOptions(from({ engine: { quantization: 'int8', threads: 1 } })).engine.threads, 1);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ speculation: 'eagle3' }, /completer\.speculation: "eagle3" needs completer\.backend "vllm"/],
    [{ speculation: 'ngram_gpu' }, /completer\.speculation: "ngram_gpu" needs completer\.backend "vllm"/],
    [{ speculation: 'suffix' }, /completer\.speculation: "suffix" needs completer\.backend "vllm"/],
    [{ backend: 'vllm', speculation: 'dflash' }, /completer\.drafter: speculation "dflash" needs a DFlash drafter folder/],
    [{ backend: 'vllm', speculation: 'eagle3', model: '/m/7b', drafter: null },
     /completer\.drafter: speculation "eagle3" needs a drafter: none ships for \/m\/7b; train one with `completer train-drafter --target \/m\/7b --out DIR`/],
    [{ backend: 'vllm', speculation: 'eagle3', model: '/m/7b' }, /completer\.drafter: .*none ships for \/m\/7b/],
    [{ drafter: 3 }, /completer\.drafter: expected an EAGLE-3 or DFlash drafter folder/],
    [{ engine: [] }, /completer\.engine: expected an object/],
    [{ engine: { quantisation: 'int8' } }, /completer\.engine: unknown engine setting "quantisation"; known: .*quantization/],
    [{ engine: { model: 'x' } }, /completer\.engine: "model" has its own setting: use completer\.model/],
    [{ engine: { num_speculative_tokens: 2 } }, /use completer\.numSpeculativeTokens/],
  ];
  for (const [values, message] of cases) {
    assert.throws(() => from(values), (err: unknown) => err instanceof SettingsError && message.test((err as Error).message),
                  JSON.stringify(values));
  }
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
