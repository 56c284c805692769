// Drives a real VS Code (code-server, already started with the extension installed) from headless Chromium with
// playwright-core, as a user would, and prints what it saw as one JSON line. The assertions are in
// tests/editors/test_vscode_real.py, which starts and stops code-server.
//
// node drive.mjs '{"url": ..., "scenario": "ghost" | "bad-setting", "file": "demo.py", "typed": "return",
//                  "path": "/abs/demo.py", "shots": "/folder/for/screenshots", "chromium": "/usr/bin/chromium"}'
//   ghost:       open `file`, go to its end, type `typed` key by key; wait for ghost text; Tab; save (Ctrl+S);
//                then type on (`typeOn`) so the request in flight is cancelled. Reports the ghost text, whether the
//                suggest widget was ever visible, and the editor's notifications.
//   bad-setting: wait for the extension's notification and report every notification's text.
import { chromium } from 'playwright-core';
import { join } from 'node:path';
import { readFileSync } from 'node:fs';

const args = JSON.parse(process.argv[2]);
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
               '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const seen = { steps: [], suggestVisible: false, ghost: null, notifications: [], consoleErrors: [] };
const step = (s) => { seen.steps.push(`${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`); };
const t0 = Date.now();

const browser = await chromium.launch({ executablePath: args.chromium ?? '/usr/bin/chromium', headless: true,
                                        args: FLAGS });
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
page.on('console', (m) => { if (m.type() === 'error') seen.consoleErrors.push(m.text().slice(0, 300)); });

const ghostText = () => page.evaluate(() => [...document.querySelectorAll('.monaco-editor [class*="ghost-text"]')]
  .filter((e) => !e.querySelector('[class*="ghost-text"]'))      // innermost elements only, each text once
  .map((e) => e.textContent).join('').replace(/\u00a0/g, ' '));
const suggestVisible = () => page.evaluate(() => !!document.querySelector('.suggest-widget.visible'));
const notifications = () => page.evaluate(() => [...document.querySelectorAll('.notification-toast')]
  .map((e) => e.textContent.replace(/\s+/g, ' ').trim()).filter(Boolean));

async function shot(name) {
  if (args.shots) await page.screenshot({ path: join(args.shots, `${name}.png`) }).catch(() => {});
}

try {
  await page.goto(args.url, { waitUntil: 'domcontentloaded', timeout: 120000 });
  await page.waitForSelector('.monaco-workbench', { timeout: 120000 });
  step('workbench ready');

  if (args.scenario === 'bad-setting') {
    await page.waitForFunction(() => [...document.querySelectorAll('.notification-toast')]
      .some((e) => e.textContent.includes('completer')), null, { timeout: 120000 });
    await page.waitForTimeout(3000);   // any further pop-ups (the client library's own, retries) show by now
    seen.notifications = await notifications();
    step('notification seen');
    await shot('bad-setting');
  } else {
    // Open the file with Quick Open, as a user would.
    await page.locator('.monaco-workbench').click({ position: { x: 600, y: 300 } }).catch(() => {});
    await page.keyboard.press('Control+P');
    await page.waitForSelector('.quick-input-widget input', { timeout: 30000 });
    await page.keyboard.type(args.file, { delay: 30 });
    await page.waitForFunction((f) => [...document.querySelectorAll('.quick-input-list .monaco-list-row')]
      .some((e) => e.textContent.includes(f)), args.file, { timeout: 60000 });
    await page.keyboard.press('Enter');
    await page.waitForSelector('.editor-instance .monaco-editor .view-lines', { timeout: 60000 });
    await page.waitForFunction(() => document.querySelector('.editor-instance .view-lines')?.textContent.includes('def'),
                               null, { timeout: 60000 });
    step('file open');
    // The extension's status bar item reads "completer" (no "loading model") once the engine is ready.
    await page.waitForFunction(() => [...document.querySelectorAll('.statusbar-item')]
      .some((e) => e.textContent.trim() === 'completer'), null, { timeout: 150000 });
    step('engine ready');
    await page.locator('.editor-instance .view-lines').click();
    await page.keyboard.press('Control+End');
    for (const ch of args.typed) {
      await page.keyboard.type(ch);
      await page.waitForTimeout(150);
      if (await suggestVisible()) seen.suggestVisible = true;
    }
    step('typed');
    // Ghost text (the first request waits for the engine to load).
    const end = Date.now() + 150000;
    while (Date.now() < end) {
      const g = await ghostText();
      if (g.trim()) { seen.ghost = g; break; }
      if (await suggestVisible()) seen.suggestVisible = true;
      await page.waitForTimeout(200);
    }
    step(`ghost ${JSON.stringify(seen.ghost)}`);
    await shot('ghost-text');
    if (seen.ghost !== null) {
      await page.waitForTimeout(1500);   // a completion-list request, if any were made, would be answered by now
      if (await suggestVisible()) seen.suggestVisible = true;
      seen.ghostStill = await ghostText();
      await page.keyboard.press('Tab');
      await page.waitForTimeout(500);
      seen.ghostAfterTab = await ghostText();
      await page.keyboard.press('Control+S');
      await page.waitForTimeout(1500);
      if (args.path) seen.savedAfterTab = readFileSync(args.path, 'utf8');
      step('accepted and saved');
      // Type on, fast (no pause between keys): each key supersedes the request in flight, which VS Code
      // cancels. With 40 ms between keys a warm server answered each request before the next key (a cold start
      // of ~1.4 s and answers in ~2-60 ms), so nothing was left to cancel.
      await page.keyboard.type(args.typeOn ?? '');
      if (await suggestVisible()) seen.suggestVisible = true;
      await page.waitForTimeout(2000);
      if (await suggestVisible()) seen.suggestVisible = true;
      step('typed on');
      // Restart the server from the command palette, as a user would after changing something.
      await page.keyboard.press('F1');
      await page.waitForSelector('.quick-input-widget input', { timeout: 30000 });
      await page.keyboard.type('completer: Restart server', { delay: 20 });
      await page.waitForFunction(() => [...document.querySelectorAll('.quick-input-list .monaco-list-row')]
        .some((e) => e.textContent.includes('completer: Restart server')), null, { timeout: 30000 });
      await page.keyboard.press('Enter');
      await page.waitForFunction(() => [...document.querySelectorAll('.statusbar-item')]
        .some((e) => e.textContent.includes('completer:')), null, { timeout: 30000 }).catch(() => {});
      await page.waitForFunction(() => [...document.querySelectorAll('.statusbar-item')]
        .some((e) => e.textContent.trim() === 'completer'), null, { timeout: 150000 });
      step('restarted');
    }
    seen.notifications = await notifications();
  }
} catch (e) {
  seen.error = String(e).slice(0, 2000);
  await shot('failure');
} finally {
  await browser.close();
}
console.log(JSON.stringify(seen));
