// The inline-completion bridge: VS Code's InlineCompletionItemProvider calls -> LSP 3.18
// `textDocument/inlineCompletion` requests and back, with the request's latency recorded. No `vscode` import.

export interface Position { line: number; character: number }
export interface Range { start: Position; end: Position }

/** LSP InlineCompletionTriggerKind. */
export const TriggerKind = { Invoked: 1, Automatic: 2 } as const;

export interface InlineCompletionParams {
  textDocument: { uri: string };
  position: Position;
  context: { triggerKind: number; selectedCompletionInfo?: { range: Range; text: string } };
}

interface LspInlineItem {
  insertText: string | { kind: 'snippet'; value: string };
  filterText?: string;
  range?: Range;
  command?: unknown;
}

export type InlineResult = { items: LspInlineItem[]; partial?: boolean } | LspInlineItem[] | null | undefined;

/** What the editor shows: text replacing `range` (an empty range at the cursor for plain ghost text). `partial`:
 * what the model had written when the answer was due (lsp/README.md, partialGhost); ask again for the rest. */
export interface GhostItem { text: string; range: Range; partial?: boolean }

/** The client capability that makes the server answer partially when the model is slower than the typing
 * (`partialAnswerMs`): the client shows it and asks again at once for the same position. */
export const PARTIAL_GHOST_CAPABILITY = { partialGhost: true };

export const REQUEST_CANCELLED = -32800;
export const SERVER_CANCELLED = -32802;

export function inlineParams(uri: string, position: Position, triggerKind: number,
                             selected?: { range: Range; text: string }): InlineCompletionParams {
  const context: InlineCompletionParams['context'] = { triggerKind };
  if (selected) context.selectedCompletionInfo = selected;
  return { textDocument: { uri }, position: { line: position.line, character: position.character }, context };
}

/** LSP result -> ghost items; items without text are dropped, a missing range means "at the cursor". */
export function toGhostItems(result: InlineResult, cursor: Position): GhostItem[] {
  const items = Array.isArray(result) ? result : (result?.items ?? []);
  const partial = !Array.isArray(result) && result?.partial === true;
  const out: GhostItem[] = [];
  for (const it of items) {
    const text = typeof it.insertText === 'string' ? it.insertText : it.insertText?.value;
    if (!text) continue;
    const g: GhostItem = { text, range: it.range ?? { start: { ...cursor }, end: { ...cursor } } };
    if (partial) g.partial = true;
    out.push(g);
  }
  return out;
}

export interface CancelToken {
  isCancellationRequested: boolean;
}

export type Send = (params: InlineCompletionParams, token: CancelToken) => Promise<InlineResult>;

/** The server's answer while its engine starts or restarts (lsp/engine_host.py, completer/engine/supervisor.py):
 * not a failure, the ghost text comes once the engine is there. */
const LOADING = /^engine (loading|restarting)\b/;

function isCancelled(e: unknown): boolean {
  const code = (e as { code?: unknown })?.code;
  return code === REQUEST_CANCELLED || code === SERVER_CANCELLED;
}

/** One provider call at a time per keystroke; counts and times what happens. */
export class InlineBridge {
  lastLatencyMs: number | null = null;
  requests = 0;
  cancelled = 0;
  errors = 0;
  lastError: string | null = null;
  loading: string | null = null;   // the last "engine loading ..." answer, until a request is answered

  constructor(private readonly send: Send, private readonly now: () => number = () => performance.now(),
              private readonly onUpdate: (b: InlineBridge) => void = () => {}) {}

  /** Ghost items for the cursor; [] when cancelled (the user typed on) or on a server error. `selected` is the
   * suggestion selected in the suggest list: VS Code shows only ghost text that extends it, so the server is told. */
  async provide(uri: string, cursor: Position, triggerKind: number, token: CancelToken,
                selected?: { range: Range; text: string }): Promise<GhostItem[]> {
    if (token.isCancellationRequested) return [];
    this.requests++;
    const started = this.now();
    try {
      const result = await this.send(inlineParams(uri, cursor, triggerKind, selected), token);
      if (token.isCancellationRequested) {
        this.cancelled++;
        return [];
      }
      this.lastLatencyMs = this.now() - started;
      this.loading = null;
      return toGhostItems(result, cursor);
    } catch (e) {
      if (isCancelled(e) || token.isCancellationRequested) {
        this.cancelled++;
        return [];
      }
      const message = e instanceof Error ? e.message : String(e);
      if (LOADING.test(message)) {
        this.loading = message;
        return [];
      }
      this.errors++;
      this.lastError = message;
      return [];
    } finally {
      this.onUpdate(this);
    }
  }

  /** Status-bar text. */
  status(): string {
    if (this.loading) return '$(sync~spin) completer: loading model';
    if (this.lastError && this.errors > 0 && this.lastLatencyMs === null) return '$(error) completer';
    return this.lastLatencyMs === null ? '$(sparkle) completer' : `$(sparkle) ${Math.round(this.lastLatencyMs)} ms`;
  }
}

/** After a partial answer the extension asks for the rest at once (`editor.action.inlineSuggest.trigger`). VS Code
 * may cancel that request itself with no key typed (seen on a loaded 2-core machine), and then nothing asked again
 * until the next key: the partial ghost text stayed. So a cancelled request at the place of a partial answer (same
 * document version, same cursor) asks again, `REST_RETRIES` times at most, `REST_RETRY_MS` apart. */
export const REST_RETRIES = 3;
export const REST_RETRY_MS = 50;

export type Outcome = 'partial' | 'cancelled' | 'answered';

export class RestAsker {
  private pending: { uri: string; version: number; line: number; character: number; tries: number } | null = null;

  /** `trigger` asks the editor for a completion there if the document and cursor are still as given. */
  constructor(
    private readonly trigger: (uri: string, version: number, position: Position) => void,
    private readonly setTimer: (fn: () => void, ms: number) => unknown = (fn, ms) => setTimeout(fn, ms),
  ) {}

  /** What the provider call at (`uri`, `version`, `position`) ended with. */
  provided(uri: string, version: number, position: Position, outcome: Outcome): void {
    const p = this.pending;
    const here = p !== null && p.uri === uri && p.version === version && p.line === position.line
      && p.character === position.character;
    if (outcome === 'partial') {
      this.pending = { uri, version, line: position.line, character: position.character, tries: 0 };
      this.ask(0);
    } else if (outcome === 'cancelled' && here && p.tries < REST_RETRIES) {
      p.tries++;
      this.ask(REST_RETRY_MS);
    } else if (outcome === 'answered' || !here) {
      this.pending = null;
    }
  }

  private ask(ms: number): void {
    const p = this.pending!;
    this.setTimer(() => {
      if (this.pending === p) this.trigger(p.uri, p.version, { line: p.line, character: p.character });
    }, ms);
  }
}

/** The `completer/didAccept` notification (lsp/README.md): what the user accepted of the ghost text, so that the
 * server counts accepted and retained characters. VS Code runs an item's command when the whole item is accepted;
 * an accept-word or accept-line is seen by the server in the document's next edit. */
export const DID_ACCEPT = 'completer/didAccept';

export interface DidAcceptParams { textDocument: { uri: string }; text: string; kind: 'full' | 'word' | 'line' }

export function didAcceptParams(uri: string, text: string, kind: DidAcceptParams['kind'] = 'full'): DidAcceptParams {
  return { textDocument: { uri }, text, kind };
}

/** The `completer/didMoveCursor` notification (lsp/README.md): where the cursor rested other than by typing, so
 * that the server prefills the prompt there before the first keystroke (a cold prompt of a real model takes most
 * of a second on a laptop's CPU). */
export const DID_MOVE_CURSOR = 'completer/didMoveCursor';
/** How long the cursor must rest before it is reported (a held arrow key reports once). */
export const CURSOR_REST_MS = 100;

export interface DidMoveCursorParams { textDocument: { uri: string }; position: { line: number; character: number } }

/** Reports cursor moves that were not typing: a move in a document whose version changed since the last move seen
 * there is typing (or an edit), which the keystroke's own completion request serves; the first move seen in a
 * document (opened, switched to) and moves in an unchanged document are reported once the cursor rests. */
export class CursorReporter {
  private versions = new Map<string, number>();
  private pending: unknown = null;

  constructor(
    private readonly send: (params: DidMoveCursorParams) => void,
    private readonly setTimer: (fn: () => void, ms: number) => unknown = (fn, ms) => setTimeout(fn, ms),
    private readonly clearTimer: (handle: unknown) => void = (h) => clearTimeout(h as ReturnType<typeof setTimeout>),
  ) {}

  moved(uri: string, position: { line: number; character: number }, version: number): void {
    const seen = this.versions.get(uri);
    this.versions.set(uri, version);
    if (this.pending !== null) this.clearTimer(this.pending);
    this.pending = null;
    if (seen !== undefined && seen !== version) return;         // typed: the completion request fills the cache
    const params = { textDocument: { uri }, position: { line: position.line, character: position.character } };
    this.pending = this.setTimer(() => {
      this.pending = null;
      this.send(params);
    }, CURSOR_REST_MS);
  }

  closed(uri: string): void {
    this.versions.delete(uri);
  }
}
