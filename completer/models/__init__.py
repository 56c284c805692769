"""Model folders: the shipped house pair and user-supplied Hugging Face checkpoints."""

from __future__ import annotations

from pathlib import Path

HOUSE_DIR = Path(__file__).parent / "house"


def resolve_model(spec: str) -> Path:
    """Turn "house:<name>", a local folder, or a hub id into a local folder, or fail with a clear message."""
    if spec.startswith("house:"):
        path = HOUSE_DIR / spec.split(":", 1)[1]
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"shipped model {spec!r} not found at {path}")
        return path
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model folder (no config.json)")
        return path
    if path.exists():
        raise FileNotFoundError(f"{path} is a file; expected a model folder with config.json")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:
        raise FileNotFoundError(f"{spec!r} is not a local folder and huggingface_hub is not installed") from e
    try:
        return Path(snapshot_download(spec, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))
    except Exception as e:  # offline, unknown id, auth
        raise FileNotFoundError(f"could not fetch {spec!r} from the Hugging Face hub "
                                f"(no network here?): {type(e).__name__}: {e}") from e
