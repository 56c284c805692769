// Re-takes screenshot.png (the picture in editors/README.md) from a real run: `completer-lsp --ws` with its default
// models, this page in headless Chromium, tests/data/stack.go typed up to `s.items = s.` in Stack.Pop, and the
// ghost text the server answers. Prints that ghost text; the screenshot shows whatever the model writes.
//   node editors/web/screenshot.mjs [OUT.png]       (env: COMPLETER_LSP_CMD, JSON argv; CHROMIUM)
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startStaticServer } from './serve.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, 'screenshot.png');
const serverCmd = JSON.parse(process.env.COMPLETER_LSP_CMD ?? '["completer-lsp"]');
const source = readFileSync(join(here, '..', '..', 'tests', 'data', 'stack.go'), 'utf8');
const cut = source.indexOf('s.items = s.') + 's.items = s'.length;   // the "." is typed

const lsp = spawn(serverCmd[0], [...serverCmd.slice(1), '--ws', '127.0.0.1:0'], { stdio: ['ignore', 'ignore', 'pipe'] });
const wsUrl = await new Promise((ok, fail) => {
  let log = '';
  lsp.stderr.on('data', (d) => {
    log += d;
    const m = /listening on ws .*?(\d+)\)/.exec(log);
    if (m) ok(`ws://127.0.0.1:${m[1]}`);
  });
  lsp.on('exit', (code) => fail(new Error(`completer-lsp exited (${code}):\n${log}`)));
});
const http = await startStaticServer(0);
const profile = mkdtempSync(join(tmpdir(), 'completer-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
  viewport: { width: 760, height: 350 },
});
try {
  const page = context.pages()[0] ?? await context.newPage();
  const options = { maxTokens: 32, debounceMs: 5 };
  await page.goto(`http://127.0.0.1:${http.address().port}/?language=go&server=${encodeURIComponent(wsUrl)}` +
                  `&options=${encodeURIComponent(JSON.stringify(options))}`);
  await page.waitForFunction(() => window.completer?.ready || window.completer?.error, null, { timeout: 120000 });
  // twice: the first answer also waits for the model to load, the second shows the latency of a keystroke
  for (let round = 0; round < 2; round++) {
    await page.evaluate(([text, offset]) => {
      window.editor.setValue(text);
      window.editor.setPosition(window.editor.getModel().getPositionAt(offset));
      window.editor.setScrollTop(0);
      window.editor.focus();
    }, [source.slice(0, cut) + source.slice(cut + 1), cut]);
    await page.keyboard.type('.');
    await page.waitForFunction(() => document.querySelector('.ghost-text-decoration, .ghost-text'), null,
                               { timeout: 120000 });
    await page.waitForTimeout(300);
  }
  const item = (await page.evaluate(() => window.completer.lastItems))[0];
  await page.screenshot({ path: out });
  console.log(`ghost text: ${JSON.stringify(item?.text)} -> ${out}`);
} finally {
  await context.close();
  http.close();
  lsp.kill('SIGTERM');
  rmSync(profile, { recursive: true, force: true });
}
