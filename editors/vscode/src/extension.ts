// completer for VS Code: starts completer-lsp with vscode-languageclient, shows its textDocument/inlineCompletion
// answers as inline (ghost-text) completions, and the last latency in the status bar.
//
// Ghost text only: the server also offers textDocument/completion (for editors without inline completions), but
// VS Code would then show the same text twice (suggest list and ghost text) and the two requests cancel each other
// on the server, so the client's completion feature is switched off unless `completer.completionList` asks for it.
import { ChildProcess } from 'node:child_process';
import * as vscode from 'vscode';
import {
  CloseAction, ErrorAction, LanguageClient, LanguageClientOptions, ServerOptions,
} from 'vscode-languageclient/node';
import {
  CursorReporter, DID_ACCEPT, DID_MOVE_CURSOR, didAcceptParams, InlineBridge, PARTIAL_GHOST_CAPABILITY, RestAsker,
  TriggerKind,
} from './bridge';
import { connectTcp, resolveServer } from './launch';
import {
  CompleterSettings, documentSelector, needsRestart, readSettings, serverCommand, SettingsError, toInitOptions,
} from './settings';

/** The client, with its own pop-ups turned into output-channel lines: the extension shows one message itself. */
class CompleterClient extends LanguageClient {
  error(message: string, data?: unknown): void {
    if (/^Server process exited with code 0\.$/.test(message)) {
      this.info(message);   // a clean exit (restart, shutdown) is not an error
      return;
    }
    super.error(message, data, false);
  }
}

let client: CompleterClient | undefined;
let settings: CompleterSettings | undefined;
let tcpServer: ChildProcess | null = null;   // a --tcp server the extension started (ended with the client)
let provider: vscode.Disposable | undefined;

function currentSettings(): CompleterSettings {
  const cfg = vscode.workspace.getConfiguration('completer');
  return readSettings((key) => cfg.get(key));
}

/** Keep vscode-languageclient from registering the server's completion provider (see the top of this file). */
function ghostTextOnly(c: LanguageClient): void {
  const feature = c.getFeature('textDocument/completion') as unknown as { initialize(): void; register(): void };
  feature.initialize = () => {};
  feature.register = () => {};
}

async function startClient(s: CompleterSettings, output: vscode.OutputChannel,
                           onGiveUp: (why: string) => void): Promise<CompleterClient> {
  const { command, args, transport } = serverCommand(s);
  const folders = (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file')
    .map((f) => f.uri.fsPath);
  const exe = resolveServer(command, folders, process.env.PATH);
  output.appendLine(`[completer] starting ${[exe, ...args].join(' ')}`);
  let serverOptions: ServerOptions;
  if (transport.kind === 'stdio') {
    serverOptions = { command: exe, args };   // no `transport`: the arguments go to the server exactly as given
  } else {
    serverOptions = async () => {
      const { socket, started } = await connectTcp(exe, args, transport.host, transport.port,
                                                   (text) => output.append(text));
      tcpServer = started;
      return { reader: socket, writer: socket };
    };
  }
  let restarts: number[] = [];
  const clientOptions: LanguageClientOptions = {
    documentSelector: documentSelector(s),
    initializationOptions: toInitOptions(s),
    outputChannel: output,
    initializationFailedHandler: () => false,   // the extension reports it (start() rejects)
    errorHandler: {
      error: () => ({ action: ErrorAction.Continue, handled: true }),
      closed: () => {
        const now = Date.now();
        restarts = restarts.filter((t) => now - t < 180000);
        if (restarts.length < 3) {
          restarts.push(now);
          return { action: CloseAction.Restart, handled: true };
        }
        onGiveUp('the server stopped 4 times in 3 minutes');
        return { action: CloseAction.DoNotRestart, handled: true };
      },
    },
  };
  const c = new CompleterClient('completer', 'completer', serverOptions, clientOptions);
  if (!s.completionList) ghostTextOnly(c);
  // partial answers: the provider asks again at once for the rest (see provideInlineCompletionItems)
  c.registerFeature({
    fillClientCapabilities(caps) {
      caps.experimental = { ...(caps.experimental as object | undefined), ...PARTIAL_GHOST_CAPABILITY };
    },
    initialize() {},
    getState: () => ({ kind: 'static' }),
    clear() {},
  });
  try {
    await c.start();
  } catch (e) {
    await stopClient(c);
    throw e;
  }
  return c;
}

async function stopClient(c: CompleterClient | undefined): Promise<void> {
  try {
    if (c?.isRunning()) await c.stop(3000);
  } catch {
    // already gone
  }
  tcpServer?.kill();
  tcpServer = null;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel('completer');
  const status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  status.command = 'completer.showStats';
  status.text = '$(sync~spin) completer: starting';
  status.show();
  context.subscriptions.push(output, status);

  const bridge = new InlineBridge(
    (params, token) => {
      if (!client) return Promise.resolve(null);
      return client.sendRequest('textDocument/inlineCompletion', params, token as vscode.CancellationToken);
    },
    () => performance.now(),
    (b) => {
      status.text = b.status();
      status.tooltip = `completer: ${b.requests} requests, ${b.cancelled} cancelled` +
        (b.lastError ? `\nlast error: ${b.lastError}` : '');
    },
  );

  const fail = (message: string) => {
    status.text = '$(error) completer';
    output.appendLine(`[completer] ${message}`);
    void vscode.window.showErrorMessage(`completer: ${message}`);
  };

  // asks for the rest of a partial answer, not if the user moved on
  const rest = new RestAsker((uri, version, at) => {
    const editor = vscode.window.activeTextEditor;
    if (editor?.document.uri.toString() === uri && editor.document.version === version
        && editor.selection.active.isEqual(new vscode.Position(at.line, at.character))) {
      void vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
    }
  });

  const register = (s: CompleterSettings) => {
    provider?.dispose();
    provider = vscode.languages.registerInlineCompletionItemProvider(documentSelector(s), {
      async provideInlineCompletionItems(document, position, ctx, token) {
        if (!client || !settings?.enable) return [];
        const trigger = ctx.triggerKind === vscode.InlineCompletionTriggerKind.Invoke
          ? TriggerKind.Invoked : TriggerKind.Automatic;
        const sel = ctx.selectedCompletionInfo;
        const selected = sel && {
          range: { start: { line: sel.range.start.line, character: sel.range.start.character },
                   end: { line: sel.range.end.line, character: sel.range.end.character } },
          text: sel.text,
        };
        const uri = document.uri.toString();
        const version = document.version;
        const items = await bridge.provide(uri, position, trigger, token, selected);
        // a partial answer: what the model had written when the answer was due, shown now, and the rest asked for
        // at once (the server answers the same text's next request when the rest is there); asked again if VS Code
        // cancels that request with no key typed (RestAsker)
        rest.provided(uri, version, position, items.some((it) => it.partial) ? 'partial'
          : token.isCancellationRequested ? 'cancelled' : 'answered');
        // the item's command runs when the user accepts it: the server learns of the accept (completer/didAccept)
        return items.map((it) => new vscode.InlineCompletionItem(it.text, new vscode.Range(
          it.range.start.line, it.range.start.character, it.range.end.line, it.range.end.character),
        { title: 'completer: accepted', command: 'completer.didAccept', arguments: [uri, it.text] }));
      },
    });
  };

  // The server answers initialize at once and loads the model in the background (seconds): the status bar says so,
  // and a model that fails to load is one message naming the settings, not a silent absence of ghost text.
  const waitForEngine = async (c: CompleterClient) => {
    status.text = '$(sync~spin) completer: loading model';
    for (;;) {
      if (client !== c) return;   // restarted meanwhile
      let health: { engineReady: boolean; engineError: string | null };
      try {
        health = await c.sendRequest('completer/health', {});
      } catch {
        return;   // stopped
      }
      if (health.engineError) {
        fail(`${health.engineError} (settings completer.model / completer.draft / completer.device)`);
        return;
      }
      if (health.engineReady) {
        status.text = '$(sparkle) completer';
        return;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  };

  const start = async () => {
    try {
      settings = currentSettings();
      register(settings);
      client = await startClient(settings, output, fail);
      void waitForEngine(client);
    } catch (e) {
      client = undefined;
      fail(e instanceof Error ? e.message : String(e));
    }
  };
  const restart = async () => {
    const old = client;
    client = undefined;
    await stopClient(old);
    await start();
  };
  await start();

  // where the cursor rests other than by typing: the server prefills the prompt there (completer/didMoveCursor)
  const cursor = new CursorReporter((params) => {
    if (client?.isRunning() && settings?.enable) void client.sendNotification(DID_MOVE_CURSOR, params);
  });
  const cursorAt = (editor: vscode.TextEditor | undefined) => {
    if (editor && settings && vscode.languages.match(documentSelector(settings), editor.document) > 0) {
      cursor.moved(editor.document.uri.toString(), editor.selection.active, editor.document.version);
    }
  };
  cursorAt(vscode.window.activeTextEditor);

  context.subscriptions.push(
    { dispose: () => provider?.dispose() },
    vscode.window.onDidChangeTextEditorSelection((e) => cursorAt(e.textEditor)),
    vscode.window.onDidChangeActiveTextEditor((e) => cursorAt(e)),
    vscode.workspace.onDidCloseTextDocument((d) => cursor.closed(d.uri.toString())),
    vscode.commands.registerCommand('completer.restart', restart),
    vscode.commands.registerCommand('completer.didAccept', async (uri: string, text: string) => {
      if (client) await client.sendNotification(DID_ACCEPT, didAcceptParams(uri, text, 'full'));
    }),
    vscode.commands.registerCommand('completer.showStats', async () => {
      if (!client) return;
      const stats = await client.sendRequest('completer/stats', {});
      output.appendLine(JSON.stringify(stats, null, 2));
      output.show(true);
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration('completer')) return;
      let next: CompleterSettings;
      try {
        next = currentSettings();
      } catch (err) {
        fail(err instanceof SettingsError ? err.message : String(err));
        return;
      }
      if (!client || !settings || needsRestart(settings, next)) {
        await restart();
        return;
      }
      settings = next;
      await client.sendNotification('workspace/didChangeConfiguration', { settings: toInitOptions(next) });
    }),
  );
}

export async function deactivate(): Promise<void> {
  const old = client;
  client = undefined;
  await stopClient(old);
}
