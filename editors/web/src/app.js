// The page: a Monaco editor whose ghost text comes from completer-lsp over a websocket.
// URL parameters: server=ws://127.0.0.1:PORT (default ws://127.0.0.1:8765), options=<initializationOptions JSON>,
// language=python (default).
import { CompleterConnection, toLspChanges, toLspPosition } from './lsp.js';
import { REQUEST_CANCELLED } from './rpc.js';

const params = new URLSearchParams(location.search);
const serverUrl = params.get('server') || 'ws://127.0.0.1:8765';
const options = params.get('options') ? JSON.parse(params.get('options')) : { maxTokens: 64, debounceMs: 30 };
const language = params.get('language') || 'python';
const status = document.getElementById('status');
const setStatus = (text) => { status.textContent = text; };

// What the page is doing, for the status line and tests.
const state = window.completer = { ready: false, requests: 0, answered: 0, cancelled: 0, served: 0, lastLatencyMs: null,
                                   lastItems: [], error: null };

window.require.config({ paths: { vs: '/monaco/vs' } });
window.require(['vs/editor/editor.main'], async () => {
  const monaco = window.monaco;
  const uri = monaco.Uri.parse(`inmemory://completer/main.${language === 'python' ? 'py' : 'txt'}`);
  const model = monaco.editor.createModel(params.get('text') ?? 'import math\n\n\ndef area(radius):\n    ',
                                          language, uri);
  const editor = window.editor = monaco.editor.create(document.getElementById('editor'), {
    model, theme: 'vs-dark', automaticLayout: true, fontSize: 15, minimap: { enabled: false },
    inlineSuggest: { enabled: true, mode: 'prefix' }, quickSuggestions: false, suggestOnTriggerCharacters: false,
  });

  const conn = new CompleterConnection(serverUrl, options);
  try {
    setStatus(`connecting to ${serverUrl}…`);
    await conn.start();
    let version = 1;
    conn.open(uri.toString(), language, model.getValue());
    model.onDidChangeContent((e) => conn.change(uri.toString(), ++version, toLspChanges(e)));
    setStatus('loading the model…');
    await conn.waitReady();
    state.stats = () => conn.stats();
    state.configure = (settings) => conn.configure(settings);
    state.ready = true;
    setStatus('completer: ready');
  } catch (e) {
    state.error = String(e.message || e);
    setStatus(`completer: ${state.error}`);
    return;
  }
  conn.rpc.onclose = () => setStatus('completer: disconnected');

  let inflight = null; // AbortController of the request in flight: a newer keystroke cancels it
  monaco.languages.registerInlineCompletionsProvider(language, {
    async provideInlineCompletions(m, position, _context, token) {
      if (m !== model) return { items: [] };
      inflight?.abort();
      const ctl = inflight = new AbortController();
      token.onCancellationRequested(() => ctl.abort());
      const started = performance.now();
      state.requests++;
      try {
        const items = await conn.inline(uri.toString(), toLspPosition(position), ctl.signal);
        state.lastLatencyMs = performance.now() - started;
        state.lastItems = items;
        state.answered++;
        if (items.length) state.served++;
        setStatus(`completer: ${state.lastLatencyMs.toFixed(0)} ms`);
        return {
          items: items.map((it) => ({
            insertText: it.text,
            range: it.range
              ? new monaco.Range(it.range.start.line + 1, it.range.start.character + 1,
                                 it.range.end.line + 1, it.range.end.character + 1)
              : new monaco.Range(position.lineNumber, position.column, position.lineNumber, position.column),
          })),
        };
      } catch (e) {
        if (e.code === REQUEST_CANCELLED || ctl.signal.aborted) state.cancelled++;
        else { state.error = e.message; setStatus(`completer: ${e.message}`); }
        return { items: [] };
      } finally {
        if (inflight === ctl) inflight = null;
      }
    },
    freeInlineCompletions() {},
  });
});
