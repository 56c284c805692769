// completer for VS Code: starts `completer-lsp --stdio` with vscode-languageclient, shows its
// textDocument/inlineCompletion answers as inline (ghost-text) completions, and the last latency in the status bar.
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, ServerOptions, TransportKind } from 'vscode-languageclient/node';
import { InlineBridge, TriggerKind } from './bridge';
import { CompleterSettings, needsRestart, readSettings, serverCommand, SettingsError, toInitOptions } from './settings';

let client: LanguageClient | undefined;
let settings: CompleterSettings | undefined;

function currentSettings(): CompleterSettings {
  const cfg = vscode.workspace.getConfiguration('completer');
  return readSettings((key) => cfg.get(key));
}

async function startClient(s: CompleterSettings, output: vscode.OutputChannel): Promise<LanguageClient> {
  const { command, args } = serverCommand(s);
  const serverOptions: ServerOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    initializationOptions: toInitOptions(s),
    outputChannel: output,
  };
  const c = new LanguageClient('completer', 'completer', serverOptions, clientOptions);
  await c.start();
  return c;
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel('completer');
  const status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  status.command = 'completer.showStats';
  status.text = '$(sync~spin) completer';
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

  const start = async () => {
    try {
      settings = currentSettings();
      client = await startClient(settings, output);
      status.text = '$(sparkle) completer';
    } catch (e) {
      status.text = '$(error) completer';
      const msg = e instanceof SettingsError ? e.message : `could not start the server: ${e}`;
      void vscode.window.showErrorMessage(`completer: ${msg}`);
    }
  };
  await start();

  context.subscriptions.push(vscode.languages.registerInlineCompletionItemProvider({ pattern: '**' }, {
    async provideInlineCompletionItems(document, position, ctx, token) {
      if (!client || !settings?.enable) return [];
      const trigger = ctx.triggerKind === vscode.InlineCompletionTriggerKind.Invoke
        ? TriggerKind.Invoked : TriggerKind.Automatic;
      const items = await bridge.provide(document.uri.toString(), position, trigger, token);
      return items.map((it) => new vscode.InlineCompletionItem(it.text, new vscode.Range(
        it.range.start.line, it.range.start.character, it.range.end.line, it.range.end.character)));
    },
  }));

  context.subscriptions.push(
    vscode.commands.registerCommand('completer.restart', async () => {
      await client?.stop();
      client = undefined;
      await start();
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
        void vscode.window.showErrorMessage(`completer: ${(err as Error).message}`);
        return;
      }
      if (!client || !settings || needsRestart(settings, next)) {
        await client?.stop();
        client = undefined;
        await start();
        return;
      }
      settings = next;
      await client.sendNotification('workspace/didChangeConfiguration', { settings: toInitOptions(next) });
    }),
  );
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
