// VS Code settings (`completer.*`) -> the server command and its initializationOptions (lsp/config.py's shape:
// {"engine": {...EngineConfig fields...}, "maxTokens": N, "debounceMs": N}). No `vscode` import: unit-tested in node.

// The server's engine settings (completer/engine/config.py; tests/editors/test_vscode.py checks these lists against it).
export const SPECULATION = ['auto', 'none', 'draft', 'ngram', 'draft+ngram', 'eagle3', 'dflash', 'ngram_gpu', 'suffix'] as const;
export const VLLM_ONLY_SPECULATION = ['eagle3', 'dflash', 'ngram_gpu', 'suffix'];
export const BACKENDS = ['torch', 'vllm', 'remote'] as const;
/** Every EngineConfig field. The ones with their own `completer.*` setting are ENGINE_SETTINGS' values; the rest
 * (quantization, threads, tensor_parallel_size, ...) go in the `completer.engine` object, snake_case as the server
 * takes them, and the server checks their values (an error names the setting). */
export const ENGINE_FIELDS = [
  'backend', 'model', 'draft', 'speculation', 'num_speculative_tokens', 'max_speculative_tokens', 'ngram_min',
  'ngram_max', 'prefix_cache', 'device', 'dtype', 'tensor_parallel_size', 'gpu_memory_utilization', 'enforce_eager',
  'load_format', 'drafter', 'draft_quantization', 'draft_tensor_parallel_size', 'threads', 'batch_decode',
  'adaptive_threads', 'quantization', 'async_scheduling', 'url', 'served_model', 'api_key', 'replicas', 'client_id',
  'timeout_s',
];
/** The EAGLE-3 drafter that ships for a house target (completer/engine/config.py HOUSE_DRAFTERS): with
 * `drafter` null the server uses it. */
export const HOUSE_DRAFTERS: Record<string, string> = { 'house:target': 'house:eagle3', 'house:v2/target': 'house:v2/eagle3' };
export const ENGINE_SETTINGS: Record<string, string> = {
  backend: 'backend', model: 'model', draft: 'draft', drafter: 'drafter', speculation: 'speculation',
  numSpeculativeTokens: 'num_speculative_tokens', device: 'device',
};

/** Code languages (VS Code language ids) the provider runs on by default: not settings.json, Markdown or logs. */
export const CODE_LANGUAGES = [
  'python', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'go', 'rust', 'java', 'kotlin', 'scala',
  'c', 'cpp', 'csharp', 'ruby', 'php', 'lua', 'shellscript', 'swift', 'r', 'julia', 'haskell', 'ocaml', 'elixir',
  'dart', 'perl', 'sql',
];

export interface CompleterSettings {
  serverCommand: string[];
  languages: string[];
  completionList: boolean;
  backend: (typeof BACKENDS)[number];
  model: string;
  draft: string | null;
  drafter: string | null;
  speculation: (typeof SPECULATION)[number];
  numSpeculativeTokens: number | 'adaptive';
  device: string;
  engine: Record<string, unknown>;
  maxTokens: number;
  debounceMs: number;
  partialAnswerMs: number;
  warmOnCursor: boolean;
  enable: boolean;
}

export const DEFAULTS: CompleterSettings = {
  serverCommand: ['completer-lsp'],
  languages: CODE_LANGUAGES,
  completionList: false,
  backend: 'torch',
  model: 'default',
  draft: 'default',
  drafter: null,
  speculation: 'auto',
  numSpeculativeTokens: 'adaptive',
  device: 'auto',
  engine: {},
  maxTokens: 32,
  debounceMs: 0,
  partialAnswerMs: 30,
  warmOnCursor: true,
  enable: true,
};

export class SettingsError extends Error {}

export interface EngineOptions {
  backend: string;
  model: string;
  draft: string | null;
  drafter?: string;
  speculation: string;
  num_speculative_tokens: number | 'adaptive';
  device: string;
  [field: string]: unknown;   // the fields of `completer.engine`
}

export interface InitOptions {
  engine: EngineOptions;
  maxTokens: number;
  debounceMs: number;
  partialAnswerMs: number;
  warmOnCursor: boolean;
}

/** Read and check every setting through `get` (VS Code's `getConfiguration('completer').get`). */
export function readSettings(get: (key: string) => unknown): CompleterSettings {
  const pick = <K extends keyof CompleterSettings>(key: K): CompleterSettings[K] => {
    const v = get(key);
    return (v === undefined ? DEFAULTS[key] : v) as CompleterSettings[K];
  };
  const s: CompleterSettings = {
    serverCommand: pick('serverCommand'), languages: pick('languages'), completionList: pick('completionList'),
    backend: pick('backend'), model: pick('model'), draft: pick('draft'), drafter: pick('drafter'),
    speculation: pick('speculation'), numSpeculativeTokens: pick('numSpeculativeTokens'), device: pick('device'),
    engine: pick('engine'),
    maxTokens: pick('maxTokens'), debounceMs: pick('debounceMs'), partialAnswerMs: pick('partialAnswerMs'),
    warmOnCursor: pick('warmOnCursor'), enable: pick('enable'),
  };
  const bad = (key: string, why: string, v: unknown) => new SettingsError(`completer.${key}: ${why}, got ${JSON.stringify(v)}`);
  if (typeof s.serverCommand === 'string') s.serverCommand = (s.serverCommand as string).trim().split(/\s+/);
  if (!Array.isArray(s.serverCommand) || s.serverCommand.length === 0 ||
      !s.serverCommand.every((x) => typeof x === 'string' && x !== '')) {
    throw bad('serverCommand', 'expected a non-empty list of strings', s.serverCommand);
  }
  if (!Array.isArray(s.languages) || !s.languages.every((x) => typeof x === 'string' && x !== '')) {
    throw bad('languages', 'expected a list of language ids (e.g. ["python", "go"]; ["*"] for every language)', s.languages);
  }
  if (typeof s.completionList !== 'boolean') throw bad('completionList', 'expected true or false', s.completionList);
  if (!BACKENDS.includes(s.backend)) throw bad('backend', `expected one of ${BACKENDS.join(', ')}`, s.backend);
  if (typeof s.model !== 'string' || !s.model) throw bad('model', 'expected a model name', s.model);
  if (s.draft === '') s.draft = null;
  if (s.draft !== null && typeof s.draft !== 'string') throw bad('draft', 'expected a model name or null', s.draft);
  if (!SPECULATION.includes(s.speculation)) {
    throw bad('speculation', `expected one of ${SPECULATION.join(', ')}`, s.speculation);
  }
  if (s.speculation.includes('draft') && !s.draft) {
    throw bad('draft', `speculation "${s.speculation}" needs a draft model`, s.draft);
  }
  if (VLLM_ONLY_SPECULATION.includes(s.speculation) && s.backend !== 'vllm') {
    throw bad('speculation', `"${s.speculation}" needs completer.backend "vllm"; the embedded backend (torch) has ` +
              'none, draft, ngram and draft+ngram', s.speculation);
  }
  if (s.drafter === '') s.drafter = null;
  if (s.drafter !== null && typeof s.drafter !== 'string') {
    throw bad('drafter', 'expected an EAGLE-3 or DFlash drafter folder (completer train-drafter), house:eagle3, or null',
              s.drafter);
  }
  if (s.speculation === 'dflash' && (!s.drafter || Object.values(HOUSE_DRAFTERS).includes(s.drafter))) {
    throw bad('drafter', 'speculation "dflash" needs a DFlash drafter folder (none ships); train one with ' +
              `\`completer train-drafter --method dflash --target ${s.model} --out DIR\` and set completer.drafter to DIR`,
              s.drafter);
  }
  if (s.speculation === 'eagle3' && !s.drafter && !(s.model in HOUSE_DRAFTERS || s.model === 'default')) {
    throw bad('drafter', `speculation "eagle3" needs a drafter: none ships for ${s.model}; train one with ` +
              `\`completer train-drafter --target ${s.model} --out DIR\` and set completer.drafter to DIR`, s.drafter);
  }
  if (s.engine === null || typeof s.engine !== 'object' || Array.isArray(s.engine)) {
    throw bad('engine', 'expected an object of further engine settings, e.g. {"quantization": "fp8"}', s.engine);
  }
  for (const key of Object.keys(s.engine)) {
    const own = Object.entries(ENGINE_SETTINGS).find(([, field]) => field === key);
    if (own) throw bad('engine', `"${key}" has its own setting: use completer.${own[0]}`, s.engine);
    if (!ENGINE_FIELDS.includes(key)) {
      throw bad('engine', `unknown engine setting "${key}"; known: ${ENGINE_FIELDS.filter(
        (f) => !Object.values(ENGINE_SETTINGS).includes(f)).join(', ')}`, s.engine);
    }
  }
  const k = s.numSpeculativeTokens;
  if (typeof k === 'string' && /^\d+$/.test(k)) s.numSpeculativeTokens = Number(k);
  if (!(s.numSpeculativeTokens === 'adaptive' ||
        (Number.isInteger(s.numSpeculativeTokens) && (s.numSpeculativeTokens as number) >= 1 &&
         (s.numSpeculativeTokens as number) <= 32))) {
    throw bad('numSpeculativeTokens', 'expected "adaptive" or an integer 1..32', k);
  }
  if (typeof s.device !== 'string' || !s.device) throw bad('device', 'expected auto, cpu, cuda or cuda:N', s.device);
  if (!Number.isInteger(s.maxTokens) || s.maxTokens < 1 || s.maxTokens > 4096) {
    throw bad('maxTokens', 'expected an integer 1..4096', s.maxTokens);
  }
  if (typeof s.debounceMs !== 'number' || !(s.debounceMs >= 0 && s.debounceMs <= 10000)) {
    throw bad('debounceMs', 'expected a number 0..10000', s.debounceMs);
  }
  if (typeof s.partialAnswerMs !== 'number' || !(s.partialAnswerMs >= 0 && s.partialAnswerMs <= 10000)) {
    throw bad('partialAnswerMs', 'expected a number 0..10000', s.partialAnswerMs);
  }
  if (typeof s.warmOnCursor !== 'boolean') throw bad('warmOnCursor', 'expected true or false', s.warmOnCursor);
  if (typeof s.enable !== 'boolean') throw bad('enable', 'expected true or false', s.enable);
  return s;
}

/** The server's initializationOptions for these settings. */
export function toInitOptions(s: CompleterSettings): InitOptions {
  return {
    engine: {
      ...s.engine,
      backend: s.backend,
      model: s.model,
      draft: s.draft,
      // the drafter only where it is used (the server checks every model path it gets against its allowlist);
      // null: the one that ships for the model, chosen by the server
      ...((s.speculation === 'eagle3' || s.speculation === 'dflash') && s.drafter ? { drafter: s.drafter } : {}),
      speculation: s.speculation,
      num_speculative_tokens: s.numSpeculativeTokens,
      device: s.device,
    },
    maxTokens: s.maxTokens,
    debounceMs: s.debounceMs,
    partialAnswerMs: s.partialAnswerMs,
    warmOnCursor: s.warmOnCursor,
  };
}

export type Transport = { kind: 'stdio' } | { kind: 'tcp'; host: string; port: number };

/** How to start the server: executable, arguments exactly as given (stdio is the server's default), and the
 * transport they name. `--tcp HOST:PORT` (or PORT) is connected to as a socket; `--ws` is for web pages and refused
 * here with the forms that work, as is a `--tcp` without a fixed port (the extension must know where to connect). */
export function serverCommand(s: CompleterSettings): { command: string; args: string[]; transport: Transport } {
  const [command, ...args] = s.serverCommand;
  const bad = (why: string) => new SettingsError(
    `completer.serverCommand: ${why}; use ["completer-lsp"] (stdio, the default) or ` +
    `["completer-lsp", "--tcp", "127.0.0.1:PORT"], got ${JSON.stringify(s.serverCommand)}`);
  if (args.some((a) => a === '--ws' || a.startsWith('--ws='))) {
    throw bad('--ws is for the web page (editors/web), not VS Code');
  }
  const i = args.findIndex((a) => a === '--tcp' || a.startsWith('--tcp='));
  if (i < 0) return { command, args, transport: { kind: 'stdio' } };
  const value = args[i].startsWith('--tcp=') ? args[i].slice('--tcp='.length) : args[i + 1];
  const m = /^(?:(.*):)?(\d+)$/.exec(value ?? '');
  const port = m ? Number(m[2]) : NaN;
  if (!m || !(port >= 1 && port <= 65535)) throw bad(`--tcp needs HOST:PORT with a fixed port, got ${JSON.stringify(value ?? null)}`);
  return { command, args, transport: { kind: 'tcp', host: m[1] || '127.0.0.1', port } };
}

/** The documents the client syncs and the ghost text runs on: files and untitled buffers of `languages` (all of
 * them for `["*"]`), so settings.json, Markdown and output panes are left alone. */
export function documentSelector(s: CompleterSettings): { scheme: string; language?: string }[] {
  const schemes = ['file', 'untitled'];
  if (s.languages.includes('*')) return schemes.map((scheme) => ({ scheme }));
  return s.languages.flatMap((language) => schemes.map((scheme) => ({ scheme, language })));
}

/** Whether a settings change needs a new server process (else didChangeConfiguration is enough). */
export function needsRestart(before: CompleterSettings, after: CompleterSettings): boolean {
  const key = (s: CompleterSettings) => JSON.stringify([s.serverCommand, s.languages, s.completionList]);
  return key(before) !== key(after);
}
