// Static server for the page: `node serve.mjs [PORT] [SERVER]` (PORT default 8080; SERVER: the websocket URL of a
// running `completer-lsp --ws HOST:PORT`, or just its port; default ws://127.0.0.1:8765), then open the printed URL.
// It says when nothing listens at SERVER yet.
import { createServer } from 'node:http';
import { connect } from 'node:net';
import { readFile } from 'node:fs/promises';
import { dirname, extname, join, normalize, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const roots = { '/monaco/': join(here, 'node_modules', 'monaco-editor', 'min'), '/src/': join(here, 'src') };
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.json': 'application/json',
                '.ttf': 'font/ttf', '.svg': 'image/svg+xml', '.png': 'image/png' };

function resolve(urlPath) {
  if (urlPath === '/' || urlPath === '/index.html') return join(here, 'index.html');
  for (const [prefix, dir] of Object.entries(roots)) {
    if (urlPath.startsWith(prefix)) {
      const file = normalize(join(dir, decodeURIComponent(urlPath.slice(prefix.length))));
      return file.startsWith(dir + sep) ? file : null; // no ../ out of the served folders
    }
  }
  return null;
}

export function startStaticServer(port = 0, host = '127.0.0.1') {
  const server = createServer(async (req, res) => {
    const file = resolve(new URL(req.url, 'http://x').pathname);
    try {
      if (!file) throw new Error('not served');
      const body = await readFile(file);
      res.writeHead(200, { 'content-type': types[extname(file)] ?? 'application/octet-stream' });
      res.end(body);
    } catch {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('not found\n');
    }
  });
  return new Promise((ok) => server.listen(port, host, () => ok(server)));
}

/** The language server's websocket URL from `SERVER` (a URL or a port number). */
export function lspUrl(arg) {
  if (!arg) return 'ws://127.0.0.1:8765';
  if (/^\d+$/.test(arg)) return `ws://127.0.0.1:${arg}`;
  if (!/^wss?:\/\//.test(arg)) throw new Error(`SERVER must be a ws:// URL or a port, got ${JSON.stringify(arg)}`);
  return arg;
}

function listening(url) {
  const { hostname, port } = new URL(url);
  return new Promise((ok) => {
    const socket = connect({ host: hostname.replace(/^\[|\]$/g, ''), port: Number(port || 80) });
    socket.once('connect', () => { socket.destroy(); ok(true); });
    socket.once('error', () => ok(false));
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  let lsp;
  try {
    lsp = lspUrl(process.argv[3]);
  } catch (e) {
    console.error(`serve.mjs: ${e.message}`);
    process.exit(2);
  }
  const server = await startStaticServer(Number(process.argv[2] ?? 8080));
  const { port } = server.address();
  console.log(`completer web IDE on http://127.0.0.1:${port}/?server=${encodeURIComponent(lsp).replace(/%3A/g, ':').replace(/%2F/g, '/')}`);
  if (!(await listening(lsp))) {
    const { hostname, port: lspPort } = new URL(lsp);
    console.log(`nothing listens at ${lsp} yet: start \`completer-lsp --ws ${hostname}:${lspPort}\`, or give the ` +
                `server's URL: node serve.mjs ${port} ws://HOST:PORT`);
  }
}
