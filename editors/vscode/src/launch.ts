// Finding and starting completer-lsp the way users expect, with one clear message when it fails. No `vscode`
// import: unit-tested in node.
//
// The extension host does not inherit the PATH of an activated venv (VS Code takes it from the login shell), so a
// bare `completer-lsp` is looked for in the workspace's venvs first, then on PATH.
import { ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';

export class ServerNotFound extends Error {}

/** The venv folders (relative to a workspace folder) searched for a bare command name, in order. */
export const VENV_DIRS = ['.venv', 'venv', '.env', 'env'];

function executable(file: string): boolean {
  try {
    if (!statSync(file).isFile()) return false;
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The absolute path of the server executable. A command with a path separator is used as is (relative to the first
 * workspace folder); a bare name (`completer-lsp`, the default) is looked for in each workspace folder's venv
 * (`.venv/bin`, `venv/bin`, ...), then on `pathEnv`. Throws ServerNotFound naming the setting and the absolute-path
 * form to use.
 */
export function resolveServer(command: string, workspaceFolders: string[], pathEnv: string | undefined,
                              platform: string = process.platform): string {
  const bin = platform === 'win32' ? 'Scripts' : 'bin';
  const exts = platform === 'win32' ? ['.exe', '.cmd', ''] : [''];
  const example = workspaceFolders.length > 0
    ? path.join(workspaceFolders[0], '.venv', bin, 'completer-lsp')
    : '/path/to/completer/.venv/bin/completer-lsp';
  const howto = `Set "completer.serverCommand" to its absolute path, e.g. ["${example}"] ` +
    '(completer-lsp is in the bin folder of the venv where the project was installed with pip install -e .).';
  if (command.includes('/') || (platform === 'win32' && command.includes('\\'))) {
    const file = path.isAbsolute(command) ? command : path.resolve(workspaceFolders[0] ?? process.cwd(), command);
    if (executable(file)) return file;
    throw new ServerNotFound(`completer.serverCommand: ${file} is not an executable file. ${howto}`);
  }
  const looked: string[] = [];
  for (const folder of workspaceFolders) {
    for (const venv of VENV_DIRS) {
      const dir = path.join(folder, venv, bin);
      looked.push(dir);
      for (const ext of exts) if (executable(path.join(dir, command + ext))) return path.join(dir, command + ext);
    }
  }
  for (const dir of (pathEnv ?? '').split(path.delimiter).filter(Boolean)) {
    for (const ext of exts) if (executable(path.join(dir, command + ext))) return path.join(dir, command + ext);
  }
  looked.push('PATH');
  throw new ServerNotFound(`cannot find the language server "${command}" (looked in ${looked.join(', ')}). ${howto}`);
}

function connect(host: string, port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host, port });
    socket.once('connect', () => { socket.removeAllListeners('error'); resolve(socket); });
    socket.once('error', reject);
  });
}

/**
 * A socket to `completer-lsp --tcp host:port`: the server already listening there, else one started with
 * `command args` (returned as `started`, to be ended with the client). Its stderr goes to `log`.
 */
export async function connectTcp(command: string, args: string[], host: string, port: number,
                                 log: (text: string) => void, timeoutMs = 60000):
  Promise<{ socket: net.Socket; started: ChildProcess | null }> {
  try {
    return { socket: await connect(host, port), started: null };
  } catch {
    // nothing listening yet: start it
  }
  const proc = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  let exited: string | null = null;
  proc.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); log(d.toString()); });
  proc.on('exit', (code, signal) => { exited = `exited with ${signal ?? code}`; });
  proc.on('error', (e) => { exited = `could not be started: ${e.message}`; });
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (exited) {
      throw new Error(`${command} ${args.join(' ')} ${exited}: ${stderr.trim().split('\n').slice(-3).join(' | ')}`);
    }
    try {
      return { socket: await connect(host, port), started: proc };
    } catch {
      if (Date.now() > end) {
        proc.kill();
        throw new Error(`${command} ${args.join(' ')} did not listen on ${host}:${port} within ${timeoutMs / 1000} s`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
