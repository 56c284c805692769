"""A checkpoint's architecture settings (``ModelConfig``), read from and written to Hugging Face's config.json; the
model (``llama``) and the GGUF reader (``gguf``) both build on it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}


@dataclass
class ModelConfig:
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 8
    num_attention_heads: int = 8
    num_key_value_heads: int = 4
    head_dim: int | None = None
    max_position_embeddings: int = 2048
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_word_embeddings: bool = True
    attention_bias: bool = False          # Qwen2: True (q/k/v only)
    model_type: str = "llama"
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")

    @classmethod
    def from_hf(cls, d: dict) -> "ModelConfig":
        arch = (d.get("architectures") or ["LlamaForCausalLM"])[0]
        if arch not in ARCHITECTURES:
            raise ValueError(f"unsupported architecture {arch!r}; supported: {', '.join(ARCHITECTURES)}")
        scaling = d.get("rope_scaling")
        if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
            raise ValueError(f"unsupported rope_scaling {scaling!r}")
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        kw["model_type"] = ARCHITECTURES[arch]
        if kw["model_type"] == "qwen2":
            kw["attention_bias"] = True
        kw.setdefault("num_key_value_heads", d.get("num_attention_heads", cls.num_attention_heads))
        if "rope_theta" not in kw and isinstance(d.get("rope_parameters"), dict):
            kw["rope_theta"] = d["rope_parameters"].get("rope_theta", cls.rope_theta)
        return cls(**kw)

    def to_hf(self) -> dict:
        d = asdict(self)
        arch = {v: k for k, v in ARCHITECTURES.items()}[self.model_type]
        d.update(architectures=[arch], hidden_act="silu", torch_dtype="float32", attention_dropout=0.0,
                 initializer_range=0.02, use_cache=True, rope_scaling=None)
        if self.model_type == "qwen2":
            d.pop("attention_bias")
            d.update(use_sliding_window=False, sliding_window=None, max_window_layers=self.num_hidden_layers)
        else:
            d.update(mlp_bias=False, pretraining_tp=1)
        return d
