"""The vLLM backend's settings: ``EngineConfig`` mapped to vLLM's engine arguments (``engine_kwargs``), and the checks
that run before the slow engine start (a quantization method vLLM has and this GPU runs, a drafter folder of the
right kind, suffix decoding's package), so a wrong setting fails at once rather than after vLLM has loaded the target.
Imports no vLLM: the checks run, and are tested, without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import VLLM_QUANTIZATION, EngineConfig

ADAPTIVE_K = 4   # vLLM has no acceptance-driven k; "adaptive" maps to this fixed k (capped by max_speculative_tokens)


def speculative_k(config: EngineConfig) -> int:
    k = config.num_speculative_tokens
    return min(ADAPTIVE_K, config.max_speculative_tokens) if k == "adaptive" else int(k)


def engine_kwargs(config: EngineConfig, model: Path | str, draft: Path | str | None = None,
                  **overrides: Any) -> dict:
    """``AsyncEngineArgs`` keyword arguments for ``config`` (model/draft already resolved to folders).

    ``overrides`` are extra vLLM engine arguments (e.g. ``max_model_len``) that win over the mapped ones."""
    if config.backend != "vllm":
        raise ValueError(f"engine_kwargs is for backend='vllm', got {config.backend!r}")
    if config.device not in ("auto", "cuda"):
        raise ValueError(f"the vLLM backend runs on CUDA GPUs chosen by CUDA_VISIBLE_DEVICES; "
                         f"device={config.device!r} is not supported (use 'auto')")
    kw: dict[str, Any] = dict(
        model=str(model),
        tokenizer=str(model),
        dtype=config.dtype,
        tensor_parallel_size=config.tensor_parallel_size,
        gpu_memory_utilization=config.gpu_memory_utilization,
        enforce_eager=config.enforce_eager,
        load_format=config.load_format,
        enable_prefix_caching=config.prefix_cache,
        disable_log_stats=True,          # our stat logger still gets every step's stats (custom loggers force it)
        seed=0,
    )
    if config.async_scheduling is not None:
        kw["async_scheduling"] = config.async_scheduling
    if config.quantization not in (None, "none"):
        kw["quantization"] = check_quantization(config.quantization, "quantization")
    k = speculative_k(config)
    if config.speculation in ("draft", "eagle3", "dflash"):
        if draft is None:
            raise ValueError(f"speculation={config.speculation!r} needs a resolved "
                             f"{'draft model' if config.speculation == 'draft' else 'drafter'} folder")
        if config.speculation == "eagle3":
            check_eagle3_drafter(draft, weights=config.load_format != "dummy")
        elif config.speculation == "dflash":
            check_dflash_drafter(draft, weights=config.load_format != "dummy")
        spec = {"method": "draft_model" if config.speculation == "draft" else config.speculation, "model": str(draft),
                "num_speculative_tokens": k}
        if config.draft_quantization not in (None, "none"):
            spec["quantization"] = check_quantization(config.draft_quantization, "draft_quantization")
        if config.draft_tensor_parallel_size is not None:
            spec["draft_tensor_parallel_size"] = config.draft_tensor_parallel_size
        kw["speculative_config"] = spec
    elif config.speculation in ("ngram", "ngram_gpu"):
        kw["speculative_config"] = {"method": config.speculation, "num_speculative_tokens": k,
                                    "prompt_lookup_min": config.ngram_min, "prompt_lookup_max": config.ngram_max}
    elif config.speculation == "suffix":
        check_suffix_decoding()
        # vLLM drafts up to k tokens per step where the suffix trees (this prompt's, and the answers vLLM served
        # before: 10000 cached requests) are confident, none where they are not
        kw["speculative_config"] = {"method": "suffix", "num_speculative_tokens": k}
    elif config.speculation == "draft+ngram":
        raise ValueError("the vLLM backend runs one proposer per engine: use speculation='draft' or 'ngram' "
                         "('draft+ngram' is the embedded backend's)")
    kw.update(overrides)
    return kw


NEEDS_SM89 = ("fp8", "fbgemm_fp8", "modelopt")   # fp8 tensor cores: Ada (8.9) / Hopper (9.0) and newer


def check_quantization(method: str, setting: str, capability: tuple[int, int] | None = None) -> str:
    """``method`` if vLLM can run it here, else ValueError naming ``setting`` — before the slow engine start.
    ``capability``: the GPU's compute capability (read from torch when not given; not checked without a GPU)."""
    if method not in VLLM_QUANTIZATION:
        raise ValueError(f"{setting}={method!r} is not a vLLM quantization method; choose one of {VLLM_QUANTIZATION}")
    if method in NEEDS_SM89:
        if capability is None:
            try:
                import torch

                capability = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
            except Exception:
                capability = None
        if capability is not None and tuple(capability) < (8, 9):
            raise ValueError(f"{setting}={method!r} needs fp8 tensor cores (compute capability 8.9+, Ada/Hopper); "
                             f"this GPU has {capability[0]}.{capability[1]}")
    return method


def check_suffix_decoding() -> None:
    """vLLM's suffix decoding imports ``arctic_inference.suffix_decoding``; without it, ValueError before the engine
    starts (vLLM would fail after loading the target, and names a release without that module)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("arctic_inference.suffix_decoding") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise ValueError("speculation='suffix' needs arctic_inference.suffix_decoding (PyPI arctic-inference 0.3.0, "
                         "the release built for vLLM 0.26; its wheel-less sdist builds the suffix tree alone with "
                         "`bash bench/vllm/arctic_suffix.sh`, then put .whl/site on PYTHONPATH)")


def check_eagle3_drafter(folder: Path | str, weights: bool = True) -> None:
    """An EAGLE-3 drafter folder (config.json with LlamaForCausalLMEagle3 and model.safetensors), or ValueError
    naming the setting — so a wrong folder fails at once, not after vLLM has loaded the target."""
    folder, d = Path(folder), _drafter_config(folder)
    archs = d.get("architectures") or []
    if not any("Eagle3" in a for a in archs):
        raise ValueError(f"drafter {folder} is not an EAGLE-3 drafter (architectures {archs}); "
                         f"make one with `completer train-drafter --target <model> --out <folder>`")
    _drafter_weights(folder, weights)


def check_dflash_drafter(folder: Path | str, weights: bool = True) -> None:
    """A DFlash drafter folder as vLLM 0.26 loads it (config.json with DFlashDraftModel and dflash_config's
    mask_token_id and target_layer_ids; *.safetensors), or ValueError naming the setting: vLLM itself would
    rename another architecture to an unregistered DFlash<arch>, or fall back to other layer ids, after minutes."""
    folder, d = Path(folder), _drafter_config(folder)
    archs = d.get("architectures") or []
    if "DFlashDraftModel" not in archs:
        raise ValueError(f"drafter {folder} is not a DFlash drafter (architectures {archs}); make one with "
                         f"`completer train-drafter --method dflash --target <model> --out <folder>`")
    missing = [key for key in ("mask_token_id", "target_layer_ids") if key not in (d.get("dflash_config") or {})]
    if missing:
        raise ValueError(f"drafter {folder}: config.json's dflash_config lacks {missing}")
    _drafter_weights(folder, weights)


def _drafter_config(folder: Path | str) -> dict:
    import json

    try:
        return json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"drafter {folder}: no readable config.json ({e})") from None


def _drafter_weights(folder: Path, weights: bool) -> None:
    if weights and not list(folder.glob("*.safetensors")):
        raise ValueError(f"drafter {folder} has no *.safetensors weights")
