"""A Llama-architecture causal LM in one file, loading and saving Hugging Face checkpoints.

Covers ``LlamaForCausalLM`` and ``Qwen2ForCausalLM`` (Qwen2 = Llama + bias on q/k/v), so the house pair and real
code models (Qwen2.5-Coder) run on the same code. Parameter names equal Hugging Face's, so a state dict saved here
is a checkpoint transformers and vLLM load. The KV cache is preallocated per request and indexed by position, so
rolling back rejected draft tokens or reusing a common prompt prefix is only a change of ``cache.length``.

Shapes: B batch, T new tokens, S cached + new positions, H query heads, Hkv key/value heads, D head dim, V vocab.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig


class KVCache:
    """Keys and values for every layer of one sequence (B=1 in serving), indexed by absolute position."""

    def __init__(self, config: ModelConfig, batch: int = 1, capacity: int = 256,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.config, self.batch, self.device, self.dtype = config, batch, device, dtype
        self.length = 0                                      # valid positions: [0, length)
        self.tokens: list[int] = []                          # the token ids at those positions (batch 1)
        c = config
        self.capacity = capacity
        shape = (c.num_hidden_layers, batch, c.num_key_value_heads, capacity, c.head_dim)  # L,B,Hkv,S,D
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)

    def ensure(self, needed: int) -> None:
        """Grow the buffers (doubling) so that ``needed`` positions fit."""
        if needed > self.config.max_position_embeddings:
            raise ValueError(f"sequence of {needed} tokens exceeds the model's "
                             f"{self.config.max_position_embeddings} positions")
        if needed > self.capacity:
            new = min(max(needed, 2 * self.capacity), self.config.max_position_embeddings)
            pad = (0, 0, 0, new - self.capacity)             # pad dim S of [L,B,Hkv,S,D]
            self.k, self.v = F.pad(self.k, pad), F.pad(self.v, pad)
            self.capacity = new

    def truncate(self, length: int) -> None:
        """Forget positions >= length (rejected draft tokens, or the part of a prompt that changed)."""
        self.length = min(self.length, length)
        del self.tokens[self.length:]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_tables(config: ModelConfig, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
    t = torch.arange(config.max_position_embeddings, dtype=torch.float32, device=device)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)                  # [P, D] (rotate-half layout, as Hugging Face)
    return emb.cos(), emb.sin()


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin with the rotate-half sign folded in ([-sin, sin] by halves): rotary is then x*cos + roll(x)*signed_sin."""
    h = sin.shape[-1] // 2
    return torch.cat([-sin[..., :h], sin[..., h:]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, H, T, D]; cos/sin: [T, D]
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin


SMALL_STEP = 16          # steps of at most this many tokens (decode, verification) use the packed weights
PACKINGS = ("fp16", "int8")


class PackedLinear:
    """One weight matrix prepared for steps of a few tokens, where streaming the weights from memory is the cost.

    "fp16": weights stored in half precision, multiplied in float32: half the bytes of float32 and, for a
    checkpoint saved in 16-bit (the house pair: bfloat16, all but ~0.01% of its values exactly representable),
    the same products. The matmul is the engine's own kernel (completer/models/kernels.py: ~1.5x the bandwidth of
    FBGEMM's at one token) when it builds on this machine, else torch's FBGEMM op. "int8": int8 weights with one scale per output row, activations in bfloat16 (a quarter of
    the bytes; changes the output slightly, so it is opt-in and its held-out quality is measured). Each row of the
    input is computed independently, so a one-token decode and a (k+1)-token verification agree, which lossless
    speculation relies on.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kind: str):
        if kind not in PACKINGS:
            raise ValueError(f"weight packing must be one of {PACKINGS}, got {kind!r}")
        self.kind, self.out_features = kind, weight.shape[0]
        w = weight.detach().float().contiguous()
        b = None if bias is None else bias.detach().float().contiguous()
        self._kernels = None
        if kind == "fp16":
            from . import kernels
            self._kernels = kernels.ops()
            if self._kernels is not None:
                self._packed, self._bias = self._kernels.pack_f16(w), b
            else:
                self._packed = torch.ops.quantized.linear_prepack_fp16(w, b)
                self._op = torch.ops.quantized.linear_dynamic_fp16
        else:
            scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
            self._w = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
            self._scale, self._bias = scale.to(torch.bfloat16), b
            self._op = torch.ops.aten._weight_int8pack_mm

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                 norm: RMSNorm | None = None, glu: bool = False) -> torch.Tensor:
        """``norm``(x) @ W.T (+ bias) (+ ``residual``); with ``glu``, x is [gate, up] and the input silu(gate) * up.
        The norm, the activation and the residual are done inside the kernel when it is there."""
        if self._kernels is not None:
            if norm is None:
                return self._kernels.linear_f16(x, self._packed, self.out_features, self._bias, residual,
                                                None, 0.0, glu)
            return self._kernels.linear_f16(x, self._packed, self.out_features, self._bias, residual,
                                            norm.weight, norm.eps, glu)
        if glu:
            g, u = x.chunk(2, dim=-1)
            x = F.silu(g).mul_(u)
        if norm is not None:
            x = F.rms_norm(x, x.shape[-1:], norm.weight, norm.eps)
        if self.kind == "fp16":
            y = self._op(x, self._packed)
        else:
            y = self._op(x.reshape(-1, x.shape[-1]).to(torch.bfloat16), self._w, self._scale).float()
            if self._bias is not None:
                y += self._bias
            y = y.view(*x.shape[:-1], self.out_features)
        return y if residual is None else y.add_(residual)

    @staticmethod
    def available(kind: str) -> str | None:
        """None when ``kind`` can run in this torch build, else the reason it cannot."""
        if kind not in PACKINGS:
            return f"unknown weight packing {kind!r}; known: {', '.join(PACKINGS)}"
        if kind == "fp16" and "fbgemm" not in torch.backends.quantized.supported_engines:
            return "fp16 weight packing needs torch's FBGEMM (an x86 CPU build)"
        if kind == "int8" and not hasattr(torch.ops.aten, "_weight_int8pack_mm"):
            return "int8 weight packing needs torch.ops.aten._weight_int8pack_mm (torch >= 2.3)"
        return None


class QuantLinear:
    """One weight matrix kept in a GGUF file's own 4/8-bit blocks (Q4_0, Q4_1, Q8_0), multiplied by the engine's
    ``linear_q`` kernel (completer/models/qmatvec.cpp: llama.cpp's integer dot products, the input rounded to int8
    per block of 32) at every step, prompts included: the model then holds the file's ~5 bits per weight instead of
    float32 (SmolLM2-135M: ~100 MB instead of ~800 MB with the fp16 copy), and a decode step streams those bytes.
    Same call as ``PackedLinear``. ``rows(ids)`` dequantises rows (the embedding lookup of a tied head)."""

    kind = "gguf"

    def __init__(self, packed: dict, bias: torch.Tensor | None, kernels):
        """``packed``: {"w", "wd", "wm": blocks.pack_q's tensors, "bits", "rows", "cols"} (gguf.block_weights)."""
        self._packed = (packed["w"], packed["wd"], packed["wm"])
        self.bits, self.out_features, self.in_features = int(packed["bits"]), int(packed["rows"]), int(packed["cols"])
        self._kernels = kernels
        self._bias = None if bias is None else bias.detach().float().contiguous()
        self.low_rank: tuple[torch.Tensor, torch.Tensor] | None = None    # LoRA (A^T [in, r], (B·scale)^T [r, out])
        self.row_delta: tuple[torch.Tensor, torch.Tensor] | None = None   # rows [n] and what they add [n, in]

    def add_delta(self, low_rank: tuple[torch.Tensor, torch.Tensor] | None,
                  row_delta: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """A LoRA delta kept beside the blocks instead of summed into float32 weights (house:smollm2/fim on
        SmolLM2's Q4_1 file): ``low_rank`` (A [r, in], B [out, r], the scale folded into B) adds x A^T B^T to every
        product; ``row_delta`` (ids [n], d [n, in]) adds d to those rows of the matrix (a tied embedding's new
        rows: the lookup and the head both). The low-rank product runs in the blocks' kernel (``linear_q``'s
        ``lora_a``/``lora_b``, also inside ``layer_step_q``), in a fixed order per output as the blocks' own sums."""
        if low_rank is not None:
            a, b = low_rank
            if a.shape[1] != self.in_features or b.shape[0] != self.out_features or a.shape[0] != b.shape[1]:
                raise ValueError(f"low-rank delta {tuple(b.shape)} x {tuple(a.shape)} does not fit a "
                                 f"{self.out_features}x{self.in_features} matrix")
            # A^T [in, r], B^T [r, out] in float16, as the delta ships them (B times the scale: 2.0 for the FIM delta);
            # float32 factors were ~29 MB read per token beside SmolLM2's ~80 MB of blocks
            self.low_rank = (a.t().half().contiguous(), b.t().half().contiguous())
        if row_delta is not None:
            ids, d = row_delta
            if d.shape != (len(ids), self.in_features) or int(ids.max()) >= self.out_features:
                raise ValueError(f"row delta {tuple(d.shape)} for rows up to {int(ids.max())} does not fit a "
                                 f"{self.out_features}x{self.in_features} matrix")
            self.row_delta = (ids.long(), d.float().contiguous())

    def __call__(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                 norm: RMSNorm | None = None, glu: bool = False) -> torch.Tensor:
        w, eps = (None, 0.0) if norm is None else (norm.weight, norm.eps)
        a, b = self.low_rank or (None, None)
        y = self._kernels.linear_q(x, *self._packed, self.out_features, self.bits, self._bias, residual, w, eps, glu,
                                   a, b)
        if self.row_delta is not None:                     # the head's new rows (no glu there)
            ids, d = self.row_delta
            h = x if norm is None else F.rms_norm(x, x.shape[-1:], w, eps)
            y.view(-1, y.shape[-1])[:, ids] += h.reshape(-1, h.shape[-1]) @ d.t()
        return y

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        from .blocks import unpack_rows
        out = unpack_rows(*self._packed, self.bits, ids.reshape(-1)).view(*ids.shape, self.in_features)
        if self.row_delta is not None:
            rid, d = self.row_delta
            hit = ids[..., None] == rid                                   # [..., n]
            if bool(hit.any()):
                out = out + hit.float() @ d
        return out


class Attention(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.c = c
        q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, q, bias=c.attention_bias)
        self.k_proj = nn.Linear(c.hidden_size, kv, bias=c.attention_bias)
        self.v_proj = nn.Linear(c.hidden_size, kv, bias=c.attention_bias)
        self.o_proj = nn.Linear(q, c.hidden_size, bias=False)
        self.fused: tuple[torch.Tensor, torch.Tensor | None] | None = None   # set by LlamaForCausalLM.fuse_
        self.packed: tuple[PackedLinear, PackedLinear] | None = None         # qkv, o: set by LlamaForCausalLM.pack_

    def qkv(self, x: torch.Tensor) -> torch.Tensor:
        """x [B,T,h] -> q, k and v side by side [B,T,(H+2Hkv)*D]: one matmul with the stacked weights of ``fuse_``
        (on a small model every op is mostly dispatch) when they are still the parameters' storage and no gradient
        is wanted (training needs the parameters themselves in the graph); otherwise three."""
        f = self.fused
        if f is not None and not torch.is_grad_enabled() and f[0].data_ptr() == self.q_proj.weight.data_ptr():
            return F.linear(x, f[0], f[1])
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)

    def forward(self, x: torch.Tensor, step: "_Step", layer: int, cache: KVCache | None,
                norm: "RMSNorm | None" = None) -> torch.Tensor:
        """x [B,T,h] (normed, or ``norm`` given: normed in the packed q/k/v matmul) -> attention output before
        o_proj, [B,T,H*D]."""
        if norm is not None and not step.packed:
            x = F.rms_norm(x, x.shape[-1:], norm.weight, norm.eps)
        c = self.c
        B, T, _ = x.shape
        H, Hkv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        if (step.packed and cache is not None and B == 1 and D % 16 == 0
                and self.packed[0]._kernels):
            # rotary, the cache write and the attention in one kernel (completer/models/matvec.cpp: attend)
            qkv = self.packed[0](x, norm=norm)
            return self.packed[0]._kernels.attend(qkv, step.cos, step.sin, cache.k[layer, 0], cache.v[layer, 0],
                                                  step.start, H, Hkv).view(B, T, H * D)
        qkv = self.packed[0](x, norm=norm) if step.packed else self.qkv(x)
        return self.attend(qkv, step, layer, cache)

    def attend(self, qkv: torch.Tensor, step: "_Step", layer: int, cache: KVCache | None) -> torch.Tensor:
        """q/k/v side by side [B,T,(H+2Hkv)*D] -> rotary, the cache write at ``step.start`` and attention over
        the cached positions, [B,T,H*D] (torch's ops; the engine's kernel is ``attend`` in matvec.cpp)."""
        c = self.c
        B, T, _ = qkv.shape
        H, Hkv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        qkv = qkv.view(B, T, H + 2 * Hkv, D)
        qk = qkv[:, :, : H + Hkv]                                   # rotary on q and k in one go
        qk = torch.addcmul(qk * step.cos, qk.roll(D // 2, -1), step.sin)  # rotate-half: [x2,x1]*[-sin,sin]
        q, k, v = qk[:, :, :H], qk[:, :, H:], qkv[:, :, H + Hkv:]   # [B,T,heads,D]
        k, v = k.transpose(1, 2), v.transpose(1, 2)                 # [B,Hkv,T,D]
        rep = H // Hkv
        start = step.start
        if cache is not None:
            cache.k[layer, :, :, start:start + T] = k
            cache.v[layer, :, :, start:start + T] = v
            if start or cache.k.dtype != k.dtype:                 # a 16-bit cache: what it holds
                k = cache.k[layer, :, :, : start + T].to(q.dtype)  # [B,Hkv,S,D]
                v = cache.v[layer, :, :, : start + T].to(q.dtype)
        if start == 0:                                              # whole sequence: causal, GQA in the kernel
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, is_causal=T > 1, enable_gqa=H != Hkv)
            return y.transpose(1, 2).reshape(B, T, H * D)
        # after cached positions (decode, verification, the new part of a prompt): the query heads that share a
        # key/value head are stacked as rows [Hkv, rep*T], so the keys are read once and never repeated
        qg = q.reshape(B, T, Hkv, rep, D).permute(0, 2, 3, 1, 4).reshape(B, Hkv, rep * T, D)
        y = F.scaled_dot_product_attention(qg, k, v, attn_mask=step.mask)             # [B,Hkv,rep*T,D]
        return y.view(B, Hkv, rep, T, D).permute(0, 3, 1, 2, 4).reshape(B, T, H * D)


class MLP(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)
        self.fused: torch.Tensor | None = None                     # [gate; up], set by LlamaForCausalLM.fuse_
        self.packed: tuple[PackedLinear, PackedLinear] | None = None   # gate_up, down: set by LlamaForCausalLM.pack_

    def gate_up(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x -> (gate, up) projections: one matmul when fused (see ``Attention.qkv``), else two."""
        f = self.fused
        if f is not None and not torch.is_grad_enabled() and f.data_ptr() == self.gate_proj.weight.data_ptr():
            return F.linear(x, f).chunk(2, dim=-1)
        return self.gate_proj(x), self.up_proj(x)

    def forward(self, x):
        g, u = self.gate_up(x)
        return self.down_proj(F.silu(g) * u)


class DecoderLayer(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.low_rank: list[torch.Tensor] = []    # a delta beside GGUF blocks, for layer_step_q (_use_blocks)

    def forward(self, x, step: "_Step", layer: int, cache: KVCache | None):
        """x [B,T,h] -> [B,T,h]. Calls the sub-modules' ``forward`` directly and adds the residuals inside the
        output matmuls (addmm): module-call and elementwise overhead is most of a small model's decode step."""
        attn, mlp, n1, n2 = self.self_attn, self.mlp, self.input_layernorm, self.post_attention_layernorm
        shape = x.shape
        if step.packed and cache is not None and shape[0] == 1 and n1.eps == n2.eps:
            (q, o), (gu, d) = attn.packed, mlp.packed
            ops = q._kernels
            if isinstance(q, QuantLinear) and attn.c.head_dim % 16 == 0:   # the same with GGUF's blocks
                return ops.layer_step_q(x, q._packed, q.out_features, q._bias, o._packed, o.out_features,
                                        gu._packed, gu.out_features, d._packed, d.out_features,
                                        [q.bits, o.bits, gu.bits, d.bits], n1.weight, n2.weight, n1.eps,
                                        step.cos, step.sin, cache.k[layer, 0], cache.v[layer, 0], step.start,
                                        attn.c.num_attention_heads, attn.c.num_key_value_heads, self.low_rank)
            if ops is not None and attn.c.head_dim % 16 == 0:   # the whole layer in one kernel call
                return ops.layer_step(x, q._packed, q.out_features, q._bias, o._packed, o.out_features, gu._packed,
                                      gu.out_features, d._packed, d.out_features, n1.weight, n2.weight, n1.eps,
                                      step.cos, step.sin, cache.k[layer, 0], cache.v[layer, 0], step.start,
                                      attn.c.num_attention_heads, attn.c.num_key_value_heads)
        return self.after_attention(x, attn.forward(x, step, layer, cache, norm=n1), step.packed)

    def after_attention(self, x: torch.Tensor, y: torch.Tensor, packed: bool) -> torch.Tensor:
        """x [B,T,h] the layer's input, y [B,T,H*D] its attention output -> the layer's output: o_proj plus the
        residual, then the MLP plus the residual."""
        attn, mlp, n2 = self.self_attn, self.mlp, self.post_attention_layernorm
        shape = x.shape
        if packed:
            x = attn.packed[1](y, residual=x)
            return mlp.packed[1](mlp.packed[0](x, norm=n2), residual=x, glu=True)
        x = torch.addmm(x.reshape(-1, shape[-1]), y.reshape(-1, y.shape[-1]), attn.o_proj.weight.t()).view(shape)
        g, u = mlp.gate_up(F.rms_norm(x, shape[-1:], n2.weight, n2.eps))
        act = F.silu(g).mul_(u)
        return torch.addmm(x.reshape(-1, shape[-1]), act.reshape(-1, act.shape[-1]), mlp.down_proj.weight.t()).view(shape)


@dataclass
class _Step:
    """What every layer of one forward shares: where the new tokens start, their rotary rows and attention mask."""
    start: int
    cos: torch.Tensor                 # [T,1,D]
    sin: torch.Tensor                 # [T,1,D], sign folded in for the rotate-half
    mask: torch.Tensor | None         # [rep*T, S] bool, after cached positions with T > 1; else None
    packed: bool = False              # use the layers' PackedLinear weights (a step of few tokens, no autograd)


class Embedding(nn.Embedding):
    """``nn.Embedding`` without its random init on the meta device (``from_pretrained`` builds the model there and
    loads the weights after): torch's ``normal_`` on a meta tensor goes through ``torch._refs``, whose first use
    imports ``torch._dynamo``, 2-10 s of every start on 2 cores for nothing."""

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            super().reset_parameters()


class Backbone(nn.Module):  # Hugging Face's ``model.`` prefix
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # inside from_pretrained's meta device the tables are made on the CPU (replaced after loading anyway): torch's
        # arange on a meta tensor imports torch._dynamo, seconds of every start
        cos, sin = rope_tables(config, device="cpu" if torch.get_default_device().type == "meta" else None)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.register_buffer("rope_sin_signed", signed_sin(sin), persistent=False)
        self.packing: str | None = None                      # see pack_ ("gguf": see from_pretrained's blocks)
        self.packed_max_tokens = SMALL_STEP
        self.embed_blocks: QuantLinear | None = None         # the embedding in GGUF blocks (then no float32 copy)
        self.kv_dtype: torch.dtype | None = None             # the KV cache's (None: the weights'); see _use_blocks

    def init_weights(self, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.ones_(p) if name.endswith("layernorm.weight") or name.endswith("norm.weight") else nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * self.config.num_hidden_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
                with torch.no_grad():
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None,
                last_only: bool = False) -> torch.Tensor:
        """input_ids [B, T] -> logits [B, T, V] (or [B, 1, V] with last_only).

        With a cache, the new tokens go at positions cache.length .. cache.length+T-1 and cache.length advances.
        """
        B, T = input_ids.shape
        start = cache.length if cache is not None else 0
        if cache is not None:
            cache.ensure(start + T)
        elif T > self.config.max_position_embeddings:
            raise ValueError(f"{T} tokens exceed the model's {self.config.max_position_embeddings} positions")
        packed = self._packed_step(B * T)
        step = _Step(start, self.rope_cos[start:start + T, None], self.rope_sin_signed[start:start + T, None], None,
                     packed)
        step.mask = self._mask(start, T, input_ids.device)
        x = self.embed(input_ids)                                                                   # [B,T,h]
        for i, layer in enumerate(self.model.layers):
            x = layer.forward(x, step, i, cache)
        if last_only:
            x = x[:, -1:]
        norm = self.model.norm
        logits = (self._packed_head(x, norm=norm) if packed                                            # [B,T,V]
                  else F.linear(F.rms_norm(x, x.shape[-1:], norm.weight, norm.eps), self.lm_head.weight))
        if cache is not None:
            cache.length = start + T
            if B == 1:
                cache.tokens.extend(input_ids[0].tolist())
        return logits

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids [...] -> their embeddings [..., h] (from GGUF blocks when the model holds those)."""
        if self.embed_blocks is not None:
            return self.embed_blocks.rows(ids)
        return F.embedding(ids, self.model.embed_tokens.weight)

    def _packed_step(self, tokens: int) -> bool:
        """Whether a forward of ``tokens`` new tokens (per sequence) runs on the packed weights."""
        if self.packing == QuantLinear.kind:
            if torch.is_grad_enabled():
                raise RuntimeError("a model holding GGUF blocks runs without autograd only (torch.inference_mode)")
            return True                           # every step: there are no float32 weights to fall back on
        return self.packing is not None and tokens <= self.packed_max_tokens and not torch.is_grad_enabled()

    def _mask(self, start: int, T: int, device) -> torch.Tensor | None:
        """The attention mask of T new tokens after ``start`` cached positions (None when T == 1 or nothing is
        cached): query i sits at absolute position start+i and sees keys 0..start+i; [rep*T, S] bool."""
        if not (start and T > 1):
            return None
        c = self.config
        pos = torch.arange(start + T, device=device)
        mask = pos[None, :] <= (start + torch.arange(T, device=device))[:, None]                  # [T,S]
        return mask.repeat(c.num_attention_heads // c.num_key_value_heads, 1)                    # [rep*T,S]

    def forward_packed(self, seqs: list[list[int]], caches: list[KVCache],
                       last_only: bool = False) -> list[torch.Tensor]:
        """New tokens of several sequences in one forward, each sequence with its own cache and positions:
        ``seqs[i]`` goes after ``caches[i].length`` cached positions. Returns per sequence its logits [T_i, V]
        (or [1, V], the last position's, with ``last_only``); every cache advances as ``forward`` would.

        Why (issue 13, concurrent requests; speculation included): the sequences' rows are packed into one matrix,
        so each matmul reads its weights once per group of rows instead of once per request, and a model step of a
        small model costs one forward's dispatch instead of one per request; only attention, which reads each
        request's own cache, runs per sequence. Each row is computed as ``forward`` computes it for that sequence
        alone (the packed weights when every sequence is a small step, the engine's row-independent kernels), so a
        decode step, a (k+1)-token verification or a draft step gives each request the logits it gets alone.
        """
        n = len(seqs)
        if n != len(caches):
            raise ValueError(f"{n} sequences for {len(caches)} caches")
        lens = [len(s) for s in seqs]
        if not n or min(lens) < 1:
            raise ValueError("every sequence needs at least one new token")
        starts = [c.length for c in caches]
        for c, st, t in zip(caches, starts, lens):
            c.ensure(st + t)
        dev = self.rope_cos.device
        ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long, device=dev)
        pos = torch.tensor([p for st, t in zip(starts, lens) for p in range(st, st + t)], device=dev)
        cos, sin = self.rope_cos[pos][:, None], self.rope_sin_signed[pos][:, None]                   # [N,1,D]
        packed = self._packed_step(max(lens))
        parts, o = [], 0
        for st, t in zip(starts, lens):
            parts.append((o, t, _Step(st, cos[o:o + t], sin[o:o + t], self._mask(st, t, dev), packed)))
            o += t
        c = self.config
        H, Hkv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        x = self.embed(ids)[None]                                                                  # [1,N,h]
        for li, layer in enumerate(self.model.layers):
            attn, n1 = layer.self_attn, layer.input_layernorm
            qkv = (attn.packed[0](x, norm=n1) if packed
                   else attn.qkv(F.rms_norm(x, x.shape[-1:], n1.weight, n1.eps)))                    # [1,N,(H+2Hkv)D]
            ops = attn.packed[0]._kernels if packed and D % 16 == 0 else None
            ys = []
            for cache, (o, t, step) in zip(caches, parts):
                part = qkv[:, o:o + t]
                if ops is not None:      # the kernel the one-sequence step runs (matvec.cpp: attend, layer_step)
                    ys.append(ops.attend(part, step.cos, step.sin, cache.k[li, 0], cache.v[li, 0], step.start,
                                         H, Hkv).view(1, t, H * D))
                else:
                    ys.append(attn.attend(part, step, li, cache))
            x = layer.after_attention(x, ys[0] if n == 1 else torch.cat(ys, dim=1), packed)
        if last_only:
            x = x[:, [o + t - 1 for o, t, _ in parts]]
        norm = self.model.norm
        logits = (self._packed_head(x, norm=norm) if packed                                            # [1,M,V]
                  else F.linear(F.rms_norm(x, x.shape[-1:], norm.weight, norm.eps), self.lm_head.weight))[0]
        for cache, st, s in zip(caches, starts, seqs):
            cache.length = st + len(s)
            cache.tokens.extend(s)
        if last_only:
            return list(logits[:, None].unbind(0))
        return [logits[o:o + t] for o, t, _ in parts]

    def forward_batch(self, input_ids: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
        """One new token for each of B sequences, each with its own cache and position: [B] ids -> logits [B, V]
        (``forward_packed`` with one token per sequence)."""
        if input_ids.shape[0] != len(caches):
            raise ValueError(f"{input_ids.shape[0]} tokens for {len(caches)} caches")
        return torch.cat(self.forward_packed([[t] for t in input_ids.tolist()], caches))

    def pack_(self, kind: str | None, max_tokens: int = SMALL_STEP) -> "LlamaForCausalLM":
        """Prepare ``PackedLinear`` copies of every matmul weight for steps of at most ``max_tokens`` tokens (decode
        and speculative verification read every weight once per token, so their bytes are the cost); prompts keep
        the float32 matmuls, which are faster at many tokens (a quality measurement packs every step). ``None``
        drops the copies. Needs ``fuse_`` first."""
        if self.packing == QuantLinear.kind:
            if kind == QuantLinear.kind:
                return self
            raise ValueError("this model holds a GGUF file's blocks and no float32 weights to pack "
                             "(from_pretrained(..., blocks=False) loads the float32 weights)")
        if kind == QuantLinear.kind:
            raise ValueError("GGUF blocks come from the file: from_pretrained(..., blocks=True)")
        self.packed_max_tokens = max_tokens
        if kind is None:
            self.packing = None
            for layer in self.model.layers:
                layer.self_attn.packed = layer.mlp.packed = None
            return self
        reason = PackedLinear.available(kind)
        if reason:
            raise ValueError(reason)
        if self.model.layers[0].self_attn.fused is None:
            raise ValueError("pack_ needs fuse_ first")
        for layer in self.model.layers:
            a, m = layer.self_attn, layer.mlp
            a.packed = (PackedLinear(*a.fused, kind), PackedLinear(a.o_proj.weight, None, kind))
            m.packed = (PackedLinear(m.fused, None, kind), PackedLinear(m.down_proj.weight, None, kind))
        self._packed_head = PackedLinear(self.lm_head.weight, None, kind)
        self.packing = kind
        return self

    def fuse_(self) -> "LlamaForCausalLM":
        """Stack each layer's q/k/v and gate/up weights into one tensor and make the parameters views of it.

        A decode step then runs 2 matmuls where it ran 5, with no extra memory, and the Hugging Face parameter names
        (checkpoints, GGUF, training) stay as they are. Only used without autograd; moving or re-typing the model
        afterwards gives the parameters new storage, which the layers notice (they fall back to concatenating).
        """
        with torch.no_grad():
            for layer in self.model.layers:
                a, m = layer.self_attn, layer.mlp
                projs = (a.q_proj, a.k_proj, a.v_proj)
                w = torch.cat([p.weight for p in projs])
                b = torch.cat([p.bias for p in projs]) if a.c.attention_bias else None
                a.fused = (w, b)
                i = 0
                for p in projs:
                    n = p.weight.shape[0]
                    p.weight = nn.Parameter(w[i:i + n], requires_grad=False)
                    if b is not None:
                        p.bias = nn.Parameter(b[i:i + n], requires_grad=False)
                    i += n
                gu = torch.cat([m.gate_proj.weight, m.up_proj.weight])
                m.fused = gu
                n = m.gate_proj.weight.shape[0]
                m.gate_proj.weight = nn.Parameter(gu[:n], requires_grad=False)
                m.up_proj.weight = nn.Parameter(gu[n:], requires_grad=False)
        return self

    def new_cache(self, capacity: int = 256) -> KVCache:
        p = next(self.parameters())
        return KVCache(self.config, capacity=capacity, device=p.device, dtype=self.kv_dtype or p.dtype)

    # --- Hugging Face checkpoint folders -----------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str | Path, device: str | torch.device = "cpu",
                        dtype: torch.dtype = torch.float32, blocks: bool = False) -> "LlamaForCausalLM":
        """The model of a Hugging Face folder (or of a GGUF file's cached folder, see completer.models.gguf).

        ``blocks``: when the folder is a GGUF file whose matmul weights are all Q4_0/Q4_1/Q8_0, the engine's kernels
        build here and the model runs on a float32 CPU, keep those weights in the file's blocks (``QuantLinear``,
        packing "gguf": every forward on them, no float32 copy, inference only; a LoRA delta on the file,
        house:smollm2/fim, rides beside them: ``QuantLinear.add_delta``); otherwise the float32 weights (with the
        delta summed in)."""
        from safetensors.torch import load_file

        path = Path(path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path} is not a model folder (no config.json)")
        config = ModelConfig.from_hf(json.loads((path / "config.json").read_text()))
        with torch.device("meta"):
            model = cls(config)
        state: dict[str, torch.Tensor] = {}
        packed: dict[str, dict] = {}
        files = sorted(path.glob("*.safetensors"))
        if not files and (path / "model.gguf").exists():   # a GGUF file, resolved by completer.models.gguf
            from .gguf import block_weights, read_state_dict
            kernels = cls._block_kernels(device, dtype) if blocks else None
            if kernels is not None:
                state, packed = block_weights(path, config)
            else:
                state = read_state_dict(path / "model.gguf", config)
        elif not files:
            raise FileNotFoundError(f"no *.safetensors weights in {path}")
        for f in files:
            state.update(load_file(str(f)))
        deltas: dict[str, tuple] = {}
        if (path / "model.delta").is_file():        # base + a shipped LoRA delta (completer.models.delta)
            from .delta import apply_delta, block_deltas, read_delta
            delta, meta = read_delta(path / "model.delta")
            if packed:                              # kept beside the blocks (QuantLinear.add_delta)
                try:
                    deltas = block_deltas(delta, meta, config)
                except ValueError:                  # it adapts a matrix the blocks hold otherwise: float32 then
                    state, packed = read_state_dict(path / "model.gguf", config), {}
            if not packed:
                state = apply_delta(state, delta, meta)
        if config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        in_blocks = {n for n, p in model.named_parameters() if p.dim() == 2} if packed else set()
        if config.tie_word_embeddings:
            in_blocks.discard("lm_head.weight")
        missing = (set(dict(model.named_parameters())) - set(state) - in_blocks
                   - ({"lm_head.weight"} if config.tie_word_embeddings else set()))
        if missing:
            raise ValueError(f"checkpoint {path} lacks {sorted(missing)[:5]}")
        for name in in_blocks:                             # no float32 storage for what stays in blocks
            mod, _, attr = name.rpartition(".")
            setattr(model.get_submodule(mod), attr, nn.Parameter(torch.empty(0, device="meta"), requires_grad=False))
        # the loaded tensors become the parameters (assign): no empty copies of the meta ones first, whose
        # empty_like on the meta device imports torch's symbolic shapes (sympy), seconds of every start
        model.load_state_dict({k: v.to(device=device, dtype=dtype) for k, v in state.items()}, strict=False,
                              assign=True)
        if config.tie_word_embeddings:
            model.lm_head.weight = model.model.embed_tokens.weight
        cos, sin = rope_tables(config, device=device)
        model.rope_cos, model.rope_sin, model.rope_sin_signed = cos, sin, signed_sin(sin)
        left = []
        for n, t in [*model.named_parameters(), *model.named_buffers()]:
            if t.is_meta and t.numel() == 0:     # a placeholder (no float32 copy of weights kept elsewhere)
                mod, _, attr = n.rpartition(".")
                setattr(model.get_submodule(mod), attr,
                        nn.Parameter(torch.empty(0, device=device, dtype=dtype), requires_grad=False))
            elif t.is_meta:
                left.append(n)
        if left:
            raise ValueError(f"checkpoint {path} left {left[:5]} unset")
        if config.tie_word_embeddings:                     # the placeholder replaced above: tie again
            model.lm_head.weight = model.model.embed_tokens.weight
        model = model.to(dtype).eval()
        return model._use_blocks(packed, kernels, deltas) if packed else model.fuse_()

    @staticmethod
    def _block_kernels(device, dtype):
        """The engine's kernels when GGUF blocks can run here (a float32 CPU model and the kernels built), else None."""
        if torch.device(device).type != "cpu" or dtype != torch.float32:
            return None
        from . import kernels
        return kernels.ops()

    def _use_blocks(self, packed: dict[str, dict], kernels,
                    deltas: dict[str, tuple] | None = None) -> "LlamaForCausalLM":
        """Every matmul on ``QuantLinear``s of ``packed`` (gguf.block_weights: q/k/v and gate/up stacked, as
        ``fuse_`` stacks the float32 weights), with ``deltas`` (delta.block_deltas: a LoRA delta by the same
        names) riding on them."""
        c = self.config
        deltas = deltas or {}

        def linear(name: str, bias: torch.Tensor | None = None) -> QuantLinear:
            q = QuantLinear(packed[name], bias, kernels)
            if name in deltas:
                q.add_delta(*deltas[name])
            return q

        for i, layer in enumerate(self.model.layers):
            a, m, pre = layer.self_attn, layer.mlp, f"model.layers.{i}."
            bias = (torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]) if c.attention_bias else None)
            a.packed = (linear(pre + "qkv", bias), linear(pre + "o"))
            m.packed = (linear(pre + "gate_up"), linear(pre + "down"))
            lins, none = (*a.packed, *m.packed), torch.empty(0)
            layer.low_rank = ([t for q in lins for t in (q.low_rank or (none, none))]
                              if any(q.low_rank is not None for q in lins) else [])
        embed = linear("embed")
        self.embed_blocks = embed
        self._packed_head = embed if c.tie_word_embeddings else linear("head")
        self.packing, self.packed_max_tokens = QuantLinear.kind, 10 ** 9
        # keys/values in 16 bits, as llama.cpp's default cache: half of what attention reads per token (at 1,000
        # positions SmolLM2 read 46 MB of float32 keys/values a token, as much as half its weights)
        self.kv_dtype = torch.float16
        return self

    def save_pretrained(self, path: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop("lm_head.weight", None)
        save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})
        cfg = self.config.to_hf()
        cfg["torch_dtype"] = str(dtype).removeprefix("torch.")
        (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
