// The web page in headless Chromium (Debian's, driven by playwright-core) against a real `completer-lsp --ws`:
// type into Monaco, ghost text appears, Tab inserts it, typing on cancels the request in flight.
// Env: COMPLETER_LSP_CMD (JSON argv of the server, default ["completer-lsp"]), COMPLETER_ENGINE (JSON engine
// options), CHROMIUM (default /usr/bin/chromium), COMPLETER_TEST_OUTPUT (folder for the screenshot).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStaticServer } from '../serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const serverCmd = JSON.parse(process.env.COMPLETER_LSP_CMD ?? '["completer-lsp"]');
const engine = JSON.parse(process.env.COMPLETER_ENGINE ?? '{}');
const outDir = process.env.COMPLETER_TEST_OUTPUT ?? join(here, '..', 'test-output');
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
               '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let lsp, wsUrl, httpServer, context, page, profile;

let serverLog = '';      // every server's stderr (WARNING and up), checked for noise at the end
const pageErrors = [];   // uncaught errors in the page

function startLsp(port = 0) {
  // Websocket clients may only name house:* models or the ones the operator lists with --model.
  const allow = [engine.model, engine.draft].filter((m) => m && !m.startsWith('house:')).flatMap((m) => ['--allow-model', m]);
  const proc = spawn(serverCmd[0], [...serverCmd.slice(1), '--ws', `127.0.0.1:${port}`, '--log-level', 'WARNING', ...allow],
                     { stdio: ['ignore', 'ignore', 'pipe'] });
  proc.stderr.on('data', (d) => { serverLog += d; });
  let log = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 60000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on ws .*?(\d+)\)/.exec(log);
      if (m) {
        clearTimeout(timer);
        wsUrl ??= `ws://127.0.0.1:${m[1]}`;
        resolve(proc);
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}):\n${log}`)));
  });
}

before(async () => {
  lsp = await startLsp();
  httpServer = await startStaticServer(0);
  profile = mkdtempSync(join(tmpdir(), 'completer-chromium-'));
  context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true, args: FLAGS,
    viewport: { width: 900, height: 360 },
  });
  page = context.pages()[0] ?? await context.newPage();
  page.on('pageerror', (e) => { pageErrors.push(String(e)); console.error('page error:', e); });
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') console.error('page:', m.text()); });
  const options = { engine, maxTokens: 12, debounceMs: 5 };
  const url = `http://127.0.0.1:${httpServer.address().port}/?server=${encodeURIComponent(wsUrl)}` +
              `&options=${encodeURIComponent(JSON.stringify(options))}`;
  await page.goto(url);
  try {
    await page.waitForFunction(() => window.completer?.ready || window.completer?.error, null,
                               { timeout: Number(process.env.COMPLETER_READY_TIMEOUT_MS ?? 120000) });
  } catch (e) {
    throw new Error(`page not ready; status line: ${await page.textContent('#status').catch(() => '?')}: ${e}`);
  }
  assert.equal(await page.evaluate(() => window.completer.error), null);
});

after(async () => {
  await context?.close();
  httpServer?.close();
  lsp?.kill('SIGTERM');
  if (profile) rmSync(profile, { recursive: true, force: true });
});

const value = () => page.evaluate(() => window.editor.getValue());
const ghostDom = () => page.evaluate(() => [...document.querySelectorAll('.ghost-text-decoration, .ghost-text')]
  .map((e) => e.textContent).join('').replace(/\u00a0/g, ' '));

/** Until the whole answer is drawn: a partial one (partialAnswerMs, when the model is slower than that) is asked
 * again at once, and the ghost text then grows to the rest. */
async function settled() {
  await page.waitForFunction(() => {
    const items = window.completer.lastItems;
    const dom = [...document.querySelectorAll('.ghost-text-decoration, .ghost-text')]
      .map((e) => e.textContent).join('').replace(/\u00a0/g, ' ');
    return items.length && !items.some((it) => it.partial) && dom === items[0].text.replace(/\n/g, '');
  }, null, { timeout: 60000 });
}

async function typeAtEnd(text) {
  await page.click('#editor .view-lines');
  await page.keyboard.press('Control+End');
  await page.keyboard.type(text);
}

test('ghost text appears while typing and Tab inserts it', async () => {
  const start = await value();
  await typeAtEnd('return math.');
  const typed = start + 'return math.';
  assert.equal(await value(), typed);
  await page.waitForFunction(() => document.querySelector('.ghost-text-decoration, .ghost-text'), null,
                             { timeout: 60000 });
  await settled();
  const shown = await ghostDom();
  const item = (await page.evaluate(() => window.completer.lastItems))[0];
  assert.ok(shown.length > 0, 'ghost text is empty');
  // What Monaco draws (first line inline, further lines below) is the server's text, line breaks aside.
  assert.equal(shown, item.text.replace(/\n/g, ''));
  assert.equal(await value(), typed, 'ghost text must not be in the document before it is accepted');
  assert.ok((await page.evaluate(() => window.completer.lastLatencyMs)) > 0);
  mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: join(outDir, 'ghost-text.png') });

  await page.keyboard.press('Tab');
  await page.waitForFunction((t) => window.editor.getValue() !== t, typed, { timeout: 10000 });
  assert.equal(await value(), typed + item.text);
  const pos = await page.evaluate(() => window.editor.getPosition());
  const lines = (typed + item.text).split('\n');
  assert.deepEqual(pos, { lineNumber: lines.length, column: lines.at(-1).length + 1 });
});

test('a partial answer is drawn, then the rest that extends it', async () => {
  // partialAnswerMs 1: the server answers with the model's first chunk (the page declares partialGhost); the page
  // asks again at once and the whole ghost text replaces it
  await page.evaluate(() => window.completer.configure({ partialAnswerMs: 1, maxTokens: 24 }));
  try {
    const n = await page.evaluate(() => window.completer.partialAnswers);
    await page.keyboard.press('Enter');
    await page.keyboard.type('area = math.');
    await page.waitForFunction((k) => window.completer.partialAnswers > k, n, { timeout: 60000 });
    await settled();
    const part = await page.evaluate(() => window.completer.lastPartial);
    const whole = (await page.evaluate(() => window.completer.lastItems))[0].text;
    assert.ok(whole.startsWith(part), `${JSON.stringify(part)} then ${JSON.stringify(whole)}`);
    const stats = await page.evaluate(() => window.completer.stats());
    assert.ok(stats.server.partial_answers > 0);
    await page.keyboard.press('Escape');
  } finally {
    await page.evaluate(() => window.completer.configure({ partialAnswerMs: 30, maxTokens: 12 }));
  }
});

test('a cursor moved without typing is reported and the server warms the prompt there', async () => {
  const reports = await page.evaluate(() => window.completer.cursorReports);
  const warmups = (await page.evaluate(() => window.completer.stats())).server.warmups;
  await page.click('#editor .view-lines');
  await page.keyboard.press('Control+Home');
  await page.waitForFunction((n) => window.completer.cursorReports > n, reports, { timeout: 10000 });
  await page.waitForFunction(async (n) => (await window.completer.stats()).server.warmups > n, warmups,
                             { timeout: 10000, polling: 100 });
  await page.keyboard.press('Control+End');
  await page.waitForFunction((n) => window.completer.cursorReports > n, reports + 1, { timeout: 10000 });
  await new Promise((r) => setTimeout(r, 300));      // every move's report has come (the click may make its own)
  const after = await page.evaluate(() => window.completer.cursorReports);
  await page.keyboard.type('x');           // typing moves the cursor too, and is not reported
  await page.keyboard.press('Backspace');
  await new Promise((r) => setTimeout(r, 400));
  assert.equal(await page.evaluate(() => window.completer.cursorReports), after);
});

test('typing on cancels the request in flight and the server sees it', async () => {
  // A long server-side debounce keeps the first request in flight while we type the next key.
  await page.evaluate(() => window.completer.configure({ debounceMs: 1500 }));
  const before = await page.evaluate(() => window.completer.stats());
  const asked = await page.evaluate(() => window.completer.requests);
  await page.keyboard.press('Enter');
  await page.keyboard.type('x');
  await page.waitForFunction((n) => window.completer.requests > n, asked, { timeout: 10000 });
  await page.keyboard.type(' = 1');
  await page.evaluate(() => window.completer.configure({ debounceMs: 5 }));
  await page.waitForFunction(() => window.completer.cancelled > 0, null, { timeout: 10000 });
  const answered = await page.evaluate(() => window.completer.answered);
  await page.keyboard.type(' ');  // a last keystroke, answered after the short debounce
  await page.waitForFunction((n) => window.completer.answered > n ||
                             document.querySelector('.ghost-text-decoration, .ghost-text'), answered, { timeout: 60000 });
  const after = await page.evaluate(() => window.completer.stats());
  assert.ok(after.server.requests_received > before.server.requests_received);
  const dropped = (s) => s.server.requests_cancelled + s.server.requests_superseded;
  assert.ok(dropped(after) > dropped(before), `the server cancelled nothing: ${JSON.stringify(after.server)}`);
  // Escape dismisses the ghost text and leaves the document as typed.
  const typed = await value();
  assert.match(typed, /\n\s*x = 1 $/);
  await page.keyboard.press('Escape');
  await page.waitForFunction(() => !document.querySelector('.ghost-text-decoration, .ghost-text'), null,
                             { timeout: 5000 });
  assert.equal(await value(), typed);
});

test('a dropped websocket reconnects: the server restarts on its port and ghost text comes back', async () => {
  const port = Number(new URL(wsUrl).port);
  lsp.kill('SIGTERM');
  await page.waitForFunction(() => !window.completer.ready && /reconnecting/.test(document.querySelector('#status').textContent),
                             null, { timeout: 20000 });
  lsp = await startLsp(port);
  await page.waitForFunction(() => window.completer.ready && window.completer.connections === 2, null,
                             { timeout: 120000 });
  // The new server got the document as it is now: ghost text where the cursor is.
  await page.evaluate(() => window.completer.configure({ debounceMs: 5 }));
  const answered = await page.evaluate(() => window.completer.answered);
  await page.keyboard.press('Enter');
  await page.keyboard.type('y = math.');
  await page.waitForFunction((n) => window.completer.answered > n, answered, { timeout: 60000 });
  assert.equal(await page.evaluate(() => window.completer.error), null);
  const s = await page.evaluate(() => window.completer.stats());
  assert.equal(s.documents, 1);
});

test('a malformed options= parameter shows what is wrong instead of "starting…"', async () => {
  const other = await context.newPage();
  try {
    const base = `http://127.0.0.1:${httpServer.address().port}/?server=${encodeURIComponent(wsUrl)}`;
    await other.goto(`${base}&options=${encodeURIComponent('{"maxTokens": 12,')}`);
    await other.waitForFunction(() => window.completer?.error, null, { timeout: 20000 });
    assert.match(await other.textContent('#status'), /^completer: the options= URL parameter is not valid JSON/);
    await other.goto(`${base}&options=${encodeURIComponent('[1, 2]')}`);
    await other.waitForFunction(() => window.completer?.error, null, { timeout: 20000 });
    assert.match(await other.textContent('#status'), /options= URL parameter must be a JSON object/);
  } finally {
    await other.close();
  }
});

test('no uncaught errors in the page and no cancel warnings in the server log', () => {
  assert.deepEqual(pageErrors, []);
  assert.doesNotMatch(serverLog, /Cancel notification for unknown message id/);
});
