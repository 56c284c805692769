// The LSP side of the page: initialize, document sync (incremental, UTF-16 positions like Monaco's columns),
// and textDocument/inlineCompletion. Pure conversions are exported for reuse.
import { JsonRpcClient } from './rpc.js';

/** Monaco (1-based line/column, UTF-16) -> LSP position (0-based, UTF-16). */
export const toLspPosition = (p) => ({ line: p.lineNumber - 1, character: p.column - 1 });

/** Monaco content-change event -> LSP TextDocumentContentChangeEvent list (applied in order). */
export function toLspChanges(event) {
  // Monaco reports the changes of one edit against the model before the edit, sorted by range from the end,
  // so applying them in the given order keeps the earlier ranges valid.
  return event.changes.map((c) => ({
    range: {
      start: { line: c.range.startLineNumber - 1, character: c.range.startColumn - 1 },
      end: { line: c.range.endLineNumber - 1, character: c.range.endColumn - 1 },
    },
    text: c.text,
  }));
}

/** LSP InlineCompletionList (or item array) -> plain items {text, range|null} in LSP coordinates. */
export function fromInlineResult(result) {
  const items = Array.isArray(result) ? result : (result?.items ?? []);
  const partial = !Array.isArray(result) && result?.partial === true;   // ask again for the rest (partialGhost)
  return items.map((it) => ({
    text: typeof it.insertText === 'string' ? it.insertText : (it.insertText?.value ?? ''),
    range: it.range ?? null,
    ...(partial ? { partial: true } : {}),
  })).filter((it) => it.text !== '');
}

export class CompleterConnection {
  constructor(url, initializationOptions) {
    this.rpc = new JsonRpcClient(url);
    this.initializationOptions = initializationOptions;
    this.messages = []; // window/showMessage from the server
  }

  async start() {
    await this.rpc.connect();
    this.rpc.on('window/showMessage', (p) => { this.messages.push(p); console.warn('completer:', p.message); });
    this.rpc.on('window/logMessage', () => null);
    const init = await this.rpc.request('initialize', {
      processId: null,
      clientInfo: { name: 'completer-web', version: '0.1.0' },
      rootUri: null,
      // partialGhost: a partial answer is shown and the rest asked for at once (app.js)
      capabilities: { general: { positionEncodings: ['utf-16'] }, textDocument: { inlineCompletion: {} },
                      experimental: { partialGhost: true } },
      initializationOptions: this.initializationOptions,
    });
    this.rpc.notify('initialized', {});
    this.capabilities = init.capabilities;
    return init;
  }

  open(uri, languageId, text, version = 1) {
    this.rpc.notify('textDocument/didOpen', { textDocument: { uri, languageId, version, text } });
  }

  change(uri, version, changes) {
    this.rpc.notify('textDocument/didChange', { textDocument: { uri, version }, contentChanges: changes });
  }

  inline(uri, position, signal) {
    return this.rpc.request('textDocument/inlineCompletion', {
      textDocument: { uri }, position, context: { triggerKind: 2 },
    }, signal).then(fromInlineResult);
  }

  /** Where the cursor rests other than by typing (completer/didMoveCursor): the server prefills the prompt there. */
  moveCursor(uri, position) {
    this.rpc.notify('completer/didMoveCursor', { textDocument: { uri }, position });
  }

  /** Change settings at run time (same keys as initializationOptions). */
  configure(settings) {
    this.rpc.notify('workspace/didChangeConfiguration', { settings });
  }

  stats() {
    return this.rpc.request('completer/stats', {});
  }

  async waitReady(timeoutMs = 120000) {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      const s = await this.stats();
      if (s.engineReady) return s;
      if (s.engineError) throw new Error(`engine failed: ${s.engineError}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error('engine did not become ready');
  }
}
