// A small JSON-RPC 2.0 client over a WebSocket (one JSON-RPC message per websocket text message, as
// `completer-lsp --ws` speaks it). Requests return promises; an AbortSignal sends $/cancelRequest.
export class RpcError extends Error {
  constructor(error) {
    super(error.message);
    this.code = error.code;
    this.data = error.data;
  }
}

export const REQUEST_CANCELLED = -32800;

const decoder = new TextDecoder();

export class JsonRpcClient {
  constructor(url) {
    this.url = url;
    this.nextId = 1;
    this.pending = new Map();
    this.handlers = new Map(); // server -> client notifications and requests, by method
    this.closed = false;
  }

  /** Open the socket; resolves when connected. */
  connect() {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url);
      this.ws = ws;
      ws.binaryType = 'arraybuffer'; // the server may send JSON in binary frames
      ws.onopen = () => resolve(this);
      ws.onerror = () => reject(new Error(`cannot connect to ${this.url}`));
      ws.onclose = (ev) => {
        this.closed = true;
        for (const { reject: rej } of this.pending.values()) rej(new Error(`connection closed (${ev.code})`));
        this.pending.clear();
        this.onclose?.(ev);
      };
      ws.onmessage = (ev) => this.#receive(ev.data);
    });
  }

  #receive(data) {
    let msg;
    try {
      msg = JSON.parse(typeof data === 'string' ? data : decoder.decode(data));
    } catch {
      console.warn('completer: not JSON from the server', data);
      return;
    }
    if (msg.method !== undefined) {
      const handler = this.handlers.get(msg.method);
      const result = handler ? handler(msg.params) : null;
      if (msg.id !== undefined) this.#send({ jsonrpc: '2.0', id: msg.id, result: result ?? null });
      return;
    }
    const p = this.pending.get(msg.id);
    if (!p) return; // answer to a request we gave up on
    this.pending.delete(msg.id);
    if (msg.error) p.reject(new RpcError(msg.error));
    else p.resolve(msg.result);
  }

  #send(obj) {
    if (this.closed) throw new Error('connection closed');
    this.ws.send(JSON.stringify(obj));
  }

  request(method, params, signal) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(new RpcError({ code: REQUEST_CANCELLED, message: 'cancelled before sending' }));
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.#send({ jsonrpc: '2.0', id, method, params });
      signal?.addEventListener('abort', () => {
        if (!this.pending.has(id)) return;
        this.notify('$/cancelRequest', { id });
      }, { once: true });
    });
  }

  notify(method, params) {
    this.#send({ jsonrpc: '2.0', method, params });
  }

  on(method, handler) {
    this.handlers.set(method, handler);
  }

  close() {
    this.ws?.close();
  }
}
