"""Training, apart from the runtime: the corpus, the house tokenizer, the target and draft models (``completer
train``), the drafters for vLLM (EAGLE-3 and DFlash, ``completer train-drafter``), a draft for a given target
(``draft_for``), held-out evaluation and GGUF writing. The runtime (``completer.models``, ``completer.engine``, the pipeline and
the language server) never imports this package; ``completer tune`` and the CLI's training commands do.
"""
