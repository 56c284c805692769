import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  CURSOR_REST_MS, CursorReporter, DID_ACCEPT, DID_MOVE_CURSOR, didAcceptParams, InlineBridge, inlineParams,
  InlineCompletionParams, REST_RETRIES, REST_RETRY_MS, RestAsker, toGhostItems, TriggerKind,
} from '../src/bridge';

const at = (line: number, character: number) => ({ line, character });

test('params are LSP 3.18 InlineCompletionParams', () => {
  assert.deepEqual(inlineParams('file:///a.py', at(3, 7), TriggerKind.Automatic), {
    textDocument: { uri: 'file:///a.py' }, position: { line: 3, character: 7 }, context: { triggerKind: 2 },
  });
});

test('results: list or array, snippet values, missing ranges, empty items dropped', () => {
  const r = { start: at(1, 0), end: at(1, 4) };
  assert.deepEqual(toGhostItems({ items: [{ insertText: 'abc' }] }, at(2, 5)),
                   [{ text: 'abc', range: { start: at(2, 5), end: at(2, 5) } }]);
  assert.deepEqual(toGhostItems([{ insertText: { kind: 'snippet', value: 'x()' }, range: r }, { insertText: '' }], at(1, 4)),
                   [{ text: 'x()', range: r }]);
  assert.deepEqual(toGhostItems(null, at(0, 0)), []);
  assert.deepEqual(toGhostItems({ items: [] }, at(0, 0)), []);
});

test('a partial answer marks its items partial (the extension asks again for the rest)', () => {
  assert.deepEqual(toGhostItems({ items: [{ insertText: 'ret' }], partial: true }, at(2, 5)),
                   [{ text: 'ret', range: { start: at(2, 5), end: at(2, 5) }, partial: true }]);
  assert.equal(toGhostItems({ items: [{ insertText: 'return 1' }] }, at(2, 5))[0].partial, undefined);
});

test('latency is the time of the request; cancellation and errors give no items', async () => {
  let t = 1000;
  const seen: InlineCompletionParams[] = [];
  const answers: Array<() => Promise<unknown>> = [
    async () => { t += 42; return { items: [{ insertText: 'return 1' }] }; },
    async () => { throw Object.assign(new Error('superseded'), { code: -32800 }); },
    async () => { throw Object.assign(new Error('engine failed'), { code: -32803 }); },
  ];
  const updates: string[] = [];
  const b = new InlineBridge(async (p) => { seen.push(p); return (await answers.shift()!()) as never; }, () => t,
                             (x) => updates.push(x.status()));
  const token = { isCancellationRequested: false };
  assert.deepEqual(await b.provide('file:///a', at(0, 3), 2, token), [{ text: 'return 1', range: { start: at(0, 3), end: at(0, 3) } }]);
  assert.equal(b.lastLatencyMs, 42);
  assert.deepEqual(await b.provide('file:///a', at(0, 4), 2, token), []);
  assert.equal(b.cancelled, 1);
  assert.deepEqual(await b.provide('file:///a', at(0, 5), 2, token), []);
  assert.equal(b.errors, 1);
  assert.equal(b.lastError, 'engine failed');
  assert.equal(seen.length, 3);
  assert.deepEqual(updates, ['$(sparkle) 42 ms', '$(sparkle) 42 ms', '$(sparkle) 42 ms']);
  // Already cancelled: nothing is sent.
  assert.deepEqual(await b.provide('file:///a', at(0, 5), 2, { isCancellationRequested: true }), []);
  assert.equal(seen.length, 3);
});

test('"engine loading" while the server starts its engine is shown as loading, not as an error', async () => {
  const answers: Array<() => Promise<unknown>> = [
    async () => { throw Object.assign(new Error("engine loading (vllm, model '/m/7b'): 37 s so far"), { code: -32803 }); },
    async () => { throw Object.assign(new Error('engine restarting after a failure (x): 3 s so far; try again'),
                                      { code: -32803 }); },
    async () => ({ items: [{ insertText: 'x' }] }),
  ];
  const updates: string[] = [];
  const b = new InlineBridge(async () => (await answers.shift()!()) as never, () => 0, (x) => updates.push(x.status()));
  const token = { isCancellationRequested: false };
  assert.deepEqual(await b.provide('file:///a', at(0, 1), 2, token), []);
  assert.deepEqual(await b.provide('file:///a', at(0, 1), 2, token), []);
  assert.equal(b.errors, 0);
  assert.match(b.loading ?? '', /^engine restarting/);
  assert.equal((await b.provide('file:///a', at(0, 1), 2, token)).length, 1);
  assert.equal(b.loading, null);
  assert.deepEqual(updates, ['$(sync~spin) completer: loading model', '$(sync~spin) completer: loading model',
                             '$(sparkle) 0 ms']);
});

test('the suggestion selected in the list is forwarded as selectedCompletionInfo', async () => {
  const seen: InlineCompletionParams[] = [];
  const b = new InlineBridge(async (p) => { seen.push(p); return { items: [] }; });
  const selected = { range: { start: at(2, 4), end: at(2, 6) }, text: 'append' };
  await b.provide('file:///a', at(2, 6), TriggerKind.Automatic, { isCancellationRequested: false }, selected);
  assert.deepEqual(seen[0].context, { triggerKind: 2, selectedCompletionInfo: selected });
});

test('an accept is reported to the server as completer/didAccept', () => {
  assert.deepEqual(didAcceptParams('file:///a.py', 'compute(x)'),
                   { textDocument: { uri: 'file:///a.py' }, text: 'compute(x)', kind: 'full' });
  assert.equal(DID_ACCEPT, 'completer/didAccept');
});

test('a cursor that rests other than by typing is reported as completer/didMoveCursor, once', () => {
  const sent: unknown[] = [];
  const timers: { fn: () => void; ms: number; live: boolean }[] = [];
  const r = new CursorReporter((p) => sent.push(p),
    (fn, ms) => { const t = { fn, ms, live: true }; timers.push(t); return t; },
    (t) => { (t as { live: boolean }).live = false; });
  const fire = () => timers.filter((t) => t.live).forEach((t) => { t.live = false; t.fn(); });
  r.moved('file:///a.py', at(3, 4), 1);          // opened / switched to: reported once the cursor rests
  r.moved('file:///a.py', at(3, 5), 1);          // moved again before the rest: only the last one
  fire();
  assert.equal(DID_MOVE_CURSOR, 'completer/didMoveCursor');
  assert.equal(timers[0].ms, CURSOR_REST_MS);
  assert.deepEqual(sent, [{ textDocument: { uri: 'file:///a.py' }, position: { line: 3, character: 5 } }]);
  r.moved('file:///a.py', at(3, 6), 2);          // typed: the keystroke's own request fills the cache
  fire();
  assert.equal(sent.length, 1);
  r.moved('file:///a.py', at(9, 0), 2);          // a click in the unchanged document
  fire();
  assert.deepEqual(sent[1], { textDocument: { uri: 'file:///a.py' }, position: { line: 9, character: 0 } });
  r.moved('file:///a.py', at(9, 1), 3);          // typing cancels a move not yet reported
  r.closed('file:///a.py');
  r.moved('file:///a.py', at(0, 0), 1);          // reopened: reported again
  fire();
  assert.equal(sent.length, 3);
});

test('the rest of a partial answer is asked for again when VS Code cancels the re-ask, not once the user moved on', () => {
  const asked: Array<[string, number, { line: number; character: number }]> = [];
  const timers: Array<{ fn: () => void; ms: number }> = [];
  const r = new RestAsker((uri, version, position) => asked.push([uri, version, position]),
    (fn, ms) => { timers.push({ fn, ms }); });
  const fire = () => timers.splice(0).forEach((t) => t.fn());
  const a = 'file:///a.py';
  r.provided(a, 4, at(2, 5), 'partial');            // shown, and the rest asked for at once
  fire();
  assert.deepEqual(asked, [[a, 4, at(2, 5)]]);
  for (let i = 0; i < REST_RETRIES + 2; i++) {      // VS Code cancels the re-ask, no key typed: asked again, a few times
    r.provided(a, 4, at(2, 5), 'cancelled');
    assert.ok(timers.length <= 1);
    if (timers.length) assert.equal(timers[0].ms, REST_RETRY_MS);
    fire();
  }
  assert.equal(asked.length, 1 + REST_RETRIES);
  r.provided(a, 4, at(2, 5), 'partial');            // a partial answer again (progress): asks, retries anew
  r.provided(a, 4, at(2, 5), 'answered');           // the whole answer came before the timer: nothing asked
  fire();
  assert.equal(asked.length, 1 + REST_RETRIES);
  r.provided(a, 4, at(2, 5), 'partial');
  fire();
  r.provided(a, 5, at(2, 6), 'cancelled');          // the user typed on: that request's cancel asks nothing
  r.provided(a, 4, at(2, 5), 'cancelled');          // nor does a late cancel of the old place
  fire();
  assert.equal(asked.length, 2 + REST_RETRIES);
  r.provided(a, 6, at(2, 7), 'cancelled');          // a cancel with no partial answer before: nothing
  fire();
  assert.equal(asked.length, 2 + REST_RETRIES);
});
