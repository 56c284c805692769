"""Fill-in-the-middle prompt templates by model family.

``fim_prompt(prefix, suffix, template, context)`` writes one prompt; ``context`` (comment lines built by
``completer.context``) goes at the start of the prefix, so it sits between the stable parts and the volatile text.

Templates (``TEMPLATES``):

- ``house``: our models, SPM order ``<|fim_suffix|>S<|fim_prefix|>C P<|fim_middle|>``. SPM because while the user
  types at the cursor the suffix and the start of the prefix stay the same, so consecutive prompts share every token
  up to the last few characters of the prefix (the engine reuses that cache).
- ``qwen``: Qwen2.5-Coder PSM ``<|fim_prefix|>C P<|fim_suffix|>S<|fim_middle|>``.
- ``starcoder``: StarCoder/StarCoder2 PSM ``<fim_prefix>C P<fim_suffix>S<fim_middle>``.
- ``codellama``: Code Llama PSM ``<PRE> C P <SUF>S <MID>`` (the spaces are part of its format).
- ``deepseek``: DeepSeek-Coder ``<｜fim▁begin｜>C P<｜fim▁hole｜>S<｜fim▁end｜>``.
- ``smollm2-fim``: SmolLM2 taught fill-in-the-middle (``house:smollm2/fim``), the house SPM order written with
  three of SmolLM2's own special tokens, since its tokenizer has no FIM tokens (``FIM_TOKENS``):
  ``<issue_comment>S<issue_start>C P<issue_closed>``.
- ``plain``: a left-to-right model without FIM tokens (SmolLM2, most GGUF chat/base models): ``C P`` only; the
  suffix is not in the prompt (postprocess still drops text that repeats what follows the cursor).

``template_for_model(folder)`` guesses the family from the checkpoint's config.json and tokenizer special tokens;
a ``"completer_template"`` key in config.json (written for GGUF files by ``completer.models.gguf``) decides first.
"""

from __future__ import annotations

import json
from pathlib import Path

from .shipped import HOUSE_DIR

TEMPLATES = ("house", "qwen", "starcoder", "codellama", "deepseek", "smollm2-fim", "plain")

# The tokens that play the parts of prefix, suffix and middle in a template without FIM tokens of its own: SmolLM2's
# vocabulary (49152 ids) has none, so ``house:smollm2/fim`` was trained with three special tokens it already has and
# that code never contains (the GitHub-issue markers of its pre-training data), keeping the tokenizer and the vocabulary
# as they are (the delta changes those three embedding rows).
FIM_TOKENS = {"smollm2-fim": {"<|fim_prefix|>": "<issue_start>", "<|fim_suffix|>": "<issue_comment>",
                              "<|fim_middle|>": "<issue_closed>"}}

# The end-of-text / file-separator strings each family may emit; the engine stops on EOS itself, these are for
# postprocess-independent stop lists.
END_TOKENS = {
    "house": ("<|endoftext|>", "<|file_sep|>", "<|fim_pad|>"),
    "qwen": ("<|endoftext|>", "<|file_sep|>", "<|fim_pad|>", "<|im_end|>"),
    "starcoder": ("<|endoftext|>", "<file_sep>"),
    "codellama": ("<EOT>", "</s>"),
    "deepseek": ("<｜end▁of▁sentence｜>", "<|EOT|>"),
    "smollm2-fim": ("<|endoftext|>", "<issue_start>", "<issue_comment>", "<issue_closed>"),
    "plain": ("<|endoftext|>", "</s>", "<|im_end|>", "<|eot_id|>"),
}

# Every family's end strings: the embedded engine stops on any of these token ids whatever the template (a model may
# emit another family's end token; its config's eos_token_id is added to them).
ALL_END_TOKENS = tuple(dict.fromkeys(t for ends in END_TOKENS.values() for t in ends))

# The fill-in-the-middle special tokens of the house and Qwen family (Qwen2.5-Coder's names, which the house tokenizer
# took over): the one place they are written; the house tokenizer (completer.models.tokenizer), the training samples
# and the benchmarks take them from here.
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"


# Each template's special tokens, as fim_prompt writes them: a model whose vocabulary lacks them reads them as text
TEMPLATE_MARKERS = {
    "house": (FIM_SUFFIX, FIM_PREFIX, FIM_MIDDLE),
    "qwen": (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE),
    "starcoder": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    "codellama": ("<PRE>", "<SUF>", "<MID>"),
    "deepseek": ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"),
    "plain": (),
}


def fim_prompt(prefix: str, suffix: str, template: str, context: str = "") -> str:
    """The model prompt for a cursor between ``prefix`` and ``suffix``; ``context`` is prepended to the prefix."""
    if context and not context.endswith("\n"):
        context += "\n"
    before = context + prefix
    if template == "house":
        return f"{FIM_SUFFIX}{suffix}{FIM_PREFIX}{before}{FIM_MIDDLE}"
    if template == "qwen":
        return f"{FIM_PREFIX}{before}{FIM_SUFFIX}{suffix}{FIM_MIDDLE}"
    if template == "starcoder":
        return f"<fim_prefix>{before}<fim_suffix>{suffix}<fim_middle>"
    if template == "codellama":
        return f"<PRE> {before} <SUF>{suffix} <MID>"
    if template == "deepseek":
        return f"<｜fim▁begin｜>{before}<｜fim▁hole｜>{suffix}<｜fim▁end｜>"
    if template == "smollm2-fim":
        t = FIM_TOKENS[template]
        return f"{t['<|fim_suffix|>']}{suffix}{t['<|fim_prefix|>']}{before}{t['<|fim_middle|>']}"
    if template == "plain":
        return before
    raise ValueError(f"unknown FIM template {template!r}; expected one of {', '.join(TEMPLATES)}")


def _special_tokens(folder: Path) -> set[str]:
    names: set[str] = set()
    tok = folder / "tokenizer.json"
    if tok.is_file():
        try:
            data = json.loads(tok.read_text(encoding="utf-8"))
            names.update(t.get("content", "") for t in data.get("added_tokens", []))
        except (OSError, ValueError):
            pass
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        try:
            data = json.loads(cfg.read_text(encoding="utf-8"))
            for t in (data.get("added_tokens_decoder") or {}).values():
                names.add(t.get("content", "") if isinstance(t, dict) else str(t))
            names.update(str(t) for t in data.get("additional_special_tokens") or [])
        except (OSError, ValueError):
            pass
    return names


def template_for_model(model_folder) -> str:
    """Guess the FIM template of a checkpoint folder from config.json and its tokenizer's special tokens.

    Our house models (``completer/models/house/*``, a config with ``"completer_house": true``, or any Llama-type
    model with Qwen's FIM token names, which is what ``completer train`` writes) use ``house`` (SPM); Qwen2 models
    use ``qwen``. Raises ValueError when the folder shows no known FIM tokens.
    """
    folder = Path(model_folder)
    config: dict = {}
    if (folder / "config.json").is_file():
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            config = {}
    try:
        is_house = folder.resolve().parent == HOUSE_DIR.resolve()
    except OSError:
        is_house = False
    if config.get("completer_template") in TEMPLATES:
        return config["completer_template"]
    if is_house or config.get("completer_house"):
        return "house"
    tokens = _special_tokens(folder)          # after the config: parsing tokenizer.json takes ~0.15 s (SmolLM2's)
    if FIM_PREFIX in tokens and str(config.get("model_type", "")).lower() == "llama":
        return "house"          # Qwen's FIM token names on a Llama model: ours, trained or copied elsewhere
    if FIM_PREFIX in tokens:
        return "qwen"
    if "<fim_prefix>" in tokens:
        return "starcoder"
    if "<｜fim▁begin｜>" in tokens:
        return "deepseek"
    if "<PRE>" in tokens or "▁<PRE>" in tokens or config.get("model_type") == "llama" and "codellama" in str(
            config.get("_name_or_path", "")).lower():
        return "codellama"
    model_type = str(config.get("model_type", "")).lower()
    if model_type == "qwen2":
        return "qwen"
    if model_type in ("starcoder2", "gpt_bigcode"):
        return "starcoder"
    raise ValueError(f"cannot tell the FIM template of the model in {folder}: no known FIM special tokens "
                     f"(set the template explicitly: one of {', '.join(TEMPLATES)})")
