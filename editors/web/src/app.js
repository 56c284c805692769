// The page: a Monaco editor whose ghost text comes from completer-lsp over a websocket.
// URL parameters: server=ws://127.0.0.1:PORT (default ws://127.0.0.1:8765), options=<initializationOptions JSON>,
// language=python (default).
import { CompleterConnection, toLspChanges, toLspPosition } from './lsp.js';
import { REQUEST_CANCELLED } from './rpc.js';

const params = new URLSearchParams(location.search);
const serverUrl = params.get('server') || 'ws://127.0.0.1:8765';
const language = params.get('language') || 'python';
const status = document.getElementById('status');
const setStatus = (text) => { status.textContent = text; };

// What the page is doing, for the status line and tests.
const state = window.completer = { ready: false, requests: 0, answered: 0, cancelled: 0, served: 0, lastLatencyMs: null,
                                   lastItems: [], error: null, connections: 0, partialAnswers: 0, lastPartial: null,
                                   cursorReports: 0 };
// How long the cursor rests before it is reported (completer/didMoveCursor): a held arrow key reports once.
const CURSOR_REST_MS = 100;

/** The initialization options from `options=`, or a message saying what is wrong with them. */
function readOptions() {
  const raw = params.get('options');
  if (raw === null) return { options: { maxTokens: 32, debounceMs: 0 } };
  let options;
  try {
    options = JSON.parse(raw);
  } catch (e) {
    return { error: `the options= URL parameter is not valid JSON (${e.message}): ${raw.slice(0, 80)}` };
  }
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    return { error: `the options= URL parameter must be a JSON object, got ${raw.slice(0, 80)}` };
  }
  return { options };
}

// Monaco rejects the promises of work it cancels (a keystroke cancels the inline-completion round) with an Error
// named "Canceled". Some of those rejections are not awaited inside Monaco and surface as uncaught errors; they
// are its normal cancellation, not a failure of the page.
const isCancellation = (e) => e && (e.name === 'Canceled' || e.message === 'Canceled');
window.addEventListener('unhandledrejection', (ev) => { if (isCancellation(ev.reason)) ev.preventDefault(); });
window.addEventListener('error', (ev) => { if (isCancellation(ev.error)) ev.preventDefault(); });

const { options, error: optionsError } = readOptions();
if (optionsError) {
  state.error = optionsError;
  setStatus(`completer: ${optionsError}`);
} else {
  window.require.config({ paths: { vs: '/monaco/vs' } });
  window.require(['vs/editor/editor.main'], () => main(window.monaco));
}

function main(monaco) {
  const uri = monaco.Uri.parse(`inmemory://completer/main.${language === 'python' ? 'py' : 'txt'}`);
  const model = monaco.editor.createModel(params.get('text') ?? 'import math\n\n\ndef area(radius):\n    ',
                                          language, uri);
  window.editor = monaco.editor.create(document.getElementById('editor'), {
    model, theme: 'vs-dark', automaticLayout: true, fontSize: 15, minimap: { enabled: false },
    inlineSuggest: { enabled: true, mode: 'prefix' }, quickSuggestions: false, suggestOnTriggerCharacters: false,
  });

  let conn = null;      // the connection in use; null while (re)connecting
  let version = 1;
  model.onDidChangeContent((e) => {
    version++;
    if (conn) conn.change(uri.toString(), version, toLspChanges(e));
  });

  // Where the cursor rests other than by typing: the server prefills the prompt there before the first keystroke
  // (completer/didMoveCursor). A move that came with an edit (the version moved since the last move) is typing,
  // which the keystroke's own completion request serves.
  let cursorVersion = null;
  let cursorTimer = null;
  function cursorMoved() {
    const seen = cursorVersion;
    cursorVersion = version;
    clearTimeout(cursorTimer);
    if (seen !== null && seen !== version) return;
    const at = version;
    cursorTimer = setTimeout(() => {
      if (!conn || version !== at) return;
      conn.moveCursor(uri.toString(), toLspPosition(window.editor.getPosition()));
      state.cursorReports++;
    }, CURSOR_REST_MS);
  }
  window.editor.onDidChangeCursorPosition(cursorMoved);

  // Connect, initialize, open the document as it is now, wait for the engine. When the websocket drops (the
  // server restarted, the network blinked), the same again after a growing pause: 0.5 s, 1 s, 2 s ... 10 s.
  let retryMs = 500;
  async function connect() {
    const c = new CompleterConnection(serverUrl, options);
    try {
      setStatus(`connecting to ${serverUrl}…`);
      await c.start();
      c.open(uri.toString(), language, model.getValue(), version);
      setStatus('loading the model…');
      c.rpc.onclose = () => dropped(c);
      await c.waitReady();
    } catch (e) {
      c.rpc.onclose = null;
      c.rpc.close();
      const message = String(e.message || e);
      if (c.rpc.closed || /cannot connect|connection closed/.test(message)) return retry(message);
      state.error = message;           // refused by the server (bad options, engine failed): retrying won't help
      setStatus(`completer: ${message}`);
      return;
    }
    conn = c;
    retryMs = 500;
    state.connections++;
    state.error = null;
    state.stats = () => c.stats();
    state.configure = (settings) => c.configure(settings);
    state.ready = true;
    setStatus('completer: ready');
    cursorVersion = null;         // the document was opened again on this connection: where the cursor is now
    cursorMoved();
  }
  function retry(why) {
    const wait = retryMs;
    retryMs = Math.min(retryMs * 2, 10000);
    setStatus(`completer: ${why}; reconnecting in ${(wait / 1000).toFixed(1)} s…`);
    setTimeout(connect, wait);
  }
  function dropped(c) {
    if (conn !== c && conn !== null) return;
    conn = null;
    state.ready = false;
    retry('disconnected');
  }

  let inflight = null; // AbortController of the request in flight: a newer keystroke cancels it
  monaco.languages.registerInlineCompletionsProvider(language, {
    async provideInlineCompletions(m, position, _context, token) {
      if (m !== model || !conn) return { items: [] };
      inflight?.abort();
      const ctl = inflight = new AbortController();
      token.onCancellationRequested(() => ctl.abort());
      const started = performance.now();
      state.requests++;
      try {
        const asked = version;
        const items = await conn.inline(uri.toString(), toLspPosition(position), ctl.signal);
        if (items.some((it) => it.partial)) {
          // what the model had written when the answer was due: shown, and the rest asked for at once (the
          // server answers the same text's next request when it is there); not once the user typed or moved
          state.partialAnswers++;
          state.lastPartial = items[0].text;
          setTimeout(() => {
            if (version === asked && window.editor.getPosition().equals(position)) {
              window.editor.trigger('completer', 'editor.action.inlineSuggest.trigger', {});
            }
          }, 0);
        }
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
        else if (!conn) state.cancelled++;      // the connection dropped under it: reconnecting
        else { state.error = e.message; setStatus(`completer: ${e.message}`); }
        return { items: [] };
      } finally {
        if (inflight === ctl) inflight = null;
      }
    },
    freeInlineCompletions() {},
  });

  void connect();
}
