// Static server for the page: `node serve.mjs [PORT]` (default 8080), then open
// http://127.0.0.1:PORT/?server=ws://127.0.0.1:8765 with `completer-lsp --ws 127.0.0.1:8765` running.
import { createServer } from 'node:http';
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

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const server = await startStaticServer(Number(process.argv[2] ?? 8080));
  const { port } = server.address();
  console.log(`completer web IDE on http://127.0.0.1:${port}/?server=ws://127.0.0.1:8765`);
}
