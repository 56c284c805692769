"""A DFlash drafter for a Llama/Qwen2 target, in the checkpoint layout vLLM 0.26's ``method: "dflash"`` loads.

Why: at house scale a vLLM step is its CPU work, and an EAGLE-3 step (its drafter run k times, one token each, each
with its own attention metadata) costs 1.6x a step without speculation (bench/results/vllm/2026-12-04f). DFlash
drafts all k tokens in ONE forward of a small decoder over the block ``[x_P, M, ..., M]`` (the token the target
just wrote, then k mask tokens), conditioned on the target's hidden states, so its proposal costs one drafter step
whatever k is; it stays in vLLM's V2 fast path with async scheduling (vllm/v1/worker/gpu/spec_decode/dflash).

Architecture (what ``vllm/model_executor/models/qwen3_dflash.py`` of vLLM 0.26 computes; ``DFlashDraftModel``):
- context: the target's residual stream after layers ``i + 1`` for ``i`` in ``target_layer_ids`` (DFlash ids: id i =
  the output of layer i), concatenated ``[T, n*H]``; ``c = hidden_norm(fc(.))`` [T, H]; for every drafter layer l its
  keys ``rope(k_norm(k_proj_l(c)))`` and values ``v_proj_l(c)`` at the context's positions (no input norm): the
  drafter never runs its layers over the context;
- the block at positions ``P .. P+k``: ``h = embed(ids)`` (the target's embedding, shared), Qwen3 decoder layers
  (pre-norm; q_norm / k_norm per head before RoPE; GQA as the target's) whose queries see the context keys at
  positions < P and the whole block (bidirectional; ``causal`` makes it causal); ``norm``; logits from the target's
  tied embedding; the output at offset i (1..k) is the draft for position ``P + i``, argmax.
Nothing of the drafter is fed back, so training is one pass (no unrolling): per block, cross-entropy of offsets
1..k against the target's own greedy continuation (self-distillation, as the drafts are verified against it).

Blocks are trained at the length served (``block_size`` = k + 1): mask slots after offset i influence offset i.
The held-out report counts acceptance as vLLM does (``completer.training.drafter.summarise``).

    completer train-drafter --method dflash --target house:v2/target --out completer/models/house/v2/dflash
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .drafter import init_weights, read_checkpoint, rope, target_features, write_checkpoint
from ..models.llama import MLP, RMSNorm, apply_rope

ARCHITECTURE = "DFlashDraftModel"
FIM_PAD = "<|fim_pad|>"      # never in a FIM training stream or a prompt: the house vocabulary's mask token


@dataclass
class DFlashConfig:
    hidden_size: int                       # = the target's (the embedding and lm_head are the target's)
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    target_hidden_size: int
    num_hidden_layers: int = 2
    target_layer_ids: list[int] = field(default_factory=list)     # id i = output of target layer i (0-based)
    mask_token_id: int = 4
    block_size: int = 5                    # trained block: the bonus token + k = block_size - 1 masks
    causal: bool = False
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048

    @classmethod
    def for_target(cls, t, mask_token_id: int, layers: int = 2, target_layer_ids: list[int] | None = None,
                   block_size: int = 5, causal: bool = False) -> "DFlashConfig":
        n = t.num_hidden_layers
        ids = sorted(target_layer_ids) if target_layer_ids else default_target_layers(n)
        if len(set(ids)) != len(ids) or ids[0] < 0 or ids[-1] >= n:
            raise ValueError(f"target layer ids must be distinct integers in 0..{n - 1} (id i = output of layer i), "
                             f"got {ids}")
        if not 0 <= mask_token_id < t.vocab_size:
            raise ValueError(f"mask token id {mask_token_id} is outside the vocabulary (0..{t.vocab_size - 1})")
        if block_size < 2:
            raise ValueError(f"block size must be at least 2 (the bonus token and one draft), got {block_size}")
        return cls(hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                   num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
                   head_dim=t.head_dim, vocab_size=t.vocab_size, target_hidden_size=t.hidden_size,
                   num_hidden_layers=layers, target_layer_ids=ids, mask_token_id=mask_token_id,
                   block_size=block_size, causal=causal, rms_norm_eps=t.rms_norm_eps, rope_theta=t.rope_theta,
                   max_position_embeddings=t.max_position_embeddings)

    @property
    def aux_layer_ids(self) -> list[int]:
        """The same depths as ``target_features`` counts them (id k = after k layers)."""
        return [i + 1 for i in self.target_layer_ids]

    def to_hf(self) -> dict:
        """config.json as vLLM 0.26 reads a DFlash drafter (no eagle keys: they would override the layer ids)."""
        return {
            "architectures": [ARCHITECTURE], "model_type": "qwen3", "num_hidden_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "vocab_size": self.vocab_size, "target_hidden_size": self.target_hidden_size,
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "max_position_embeddings": self.max_position_embeddings, "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "block_size": self.block_size,
            "dflash_config": {"mask_token_id": self.mask_token_id, "target_layer_ids": self.target_layer_ids,
                              **({"causal": True} if self.causal else {})},
        }

    @classmethod
    def from_hf(cls, d: dict) -> "DFlashConfig":
        if ARCHITECTURE not in (d.get("architectures") or []):
            raise ValueError(f"not a DFlash drafter config (architectures {d.get('architectures')})")
        dc = d.get("dflash_config") or {}
        if "mask_token_id" not in dc or "target_layer_ids" not in dc:
            raise ValueError("DFlash config.json lacks dflash_config.mask_token_id / target_layer_ids")
        return cls(hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"],
                   num_attention_heads=d["num_attention_heads"], num_key_value_heads=d["num_key_value_heads"],
                   head_dim=d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"],
                   vocab_size=d["vocab_size"], target_hidden_size=d.get("target_hidden_size", d["hidden_size"]),
                   num_hidden_layers=d["num_hidden_layers"], target_layer_ids=list(dc["target_layer_ids"]),
                   mask_token_id=dc["mask_token_id"], block_size=d.get("block_size", 5),
                   causal=bool(dc.get("causal", False)), rms_norm_eps=d["rms_norm_eps"],
                   rope_theta=d.get("rope_theta", 10000.0), max_position_embeddings=d["max_position_embeddings"])


def default_target_layers(n: int) -> list[int]:
    """Low, middle, last (DFlash ids): EAGLE-3's three depths of the same target (after 2, n/2 and n layers)."""
    ids = sorted({min(1, n - 1), max(0, n // 2 - 1), n - 1})
    return ids


class _Attention(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, q, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, kv, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, kv, bias=False)
        self.o_proj = nn.Linear(q, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)       # per head, before RoPE (Qwen3)
        self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)


class _Layer(nn.Module):
    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = _Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)


class DFlashDrafter(nn.Module):
    """Parameter names are the checkpoint's (vLLM prefixes ``model.``); the embedding is the target's, passed in."""

    def __init__(self, config: DFlashConfig):
        super().__init__()
        c = self.config = config
        self.fc = nn.Linear(len(c.target_layer_ids) * c.target_hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        cos, sin = rope(c.head_dim, c.rope_theta, c.max_position_embeddings)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def _heads(self, x: torch.Tensor, proj: nn.Linear, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return proj(x).view(B, T, n, self.config.head_dim).transpose(1, 2)          # [B, n, T, D]

    def forward(self, embed: torch.Tensor, feats: torch.Tensor, ids: torch.Tensor, pos: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """Hidden states [B, Q, H] (after ``norm``) of the query tokens ``ids`` [B, Q] at positions ``pos`` [Q]
        (or [B, Q]: each sequence its own).

        ``feats`` [B, T, n*H]: the target's features at positions 0..T-1 (the context); ``mask`` [Q, T + Q] bool
        (or [B, Q, T + Q]): which context and query keys each query sees; ``embed`` [V, H]: the target's embedding
        matrix."""
        c = self.config
        ctx = self.hidden_norm(self.fc(feats))                                      # [B, T, H]
        T = ctx.shape[1]
        cos_c, sin_c = self.rope_cos[:T], self.rope_sin[:T]
        cos_q, sin_q = self.rope_cos[pos], self.rope_sin[pos]                       # [Q, D] or [B, Q, D]
        if pos.dim() == 2:                                                          # -> [B, 1, Q, D]: per head
            cos_q, sin_q = cos_q[:, None], sin_q[:, None]
        if mask.dim() == 3:
            mask = mask[:, None]                                                    # [B, 1, Q, T + Q]
        h = F.embedding(ids, embed)                                                 # [B, Q, H]
        for layer in self.layers:
            a = layer.self_attn
            k_ctx = apply_rope(a.k_norm(self._heads(ctx, a.k_proj, c.num_key_value_heads)), cos_c, sin_c)
            v_ctx = self._heads(ctx, a.v_proj, c.num_key_value_heads)
            x = layer.input_layernorm(h)
            q = apply_rope(a.q_norm(self._heads(x, a.q_proj, c.num_attention_heads)), cos_q, sin_q)
            k = apply_rope(a.k_norm(self._heads(x, a.k_proj, c.num_key_value_heads)), cos_q, sin_q)
            v = self._heads(x, a.v_proj, c.num_key_value_heads)
            y = F.scaled_dot_product_attention(q, torch.cat([k_ctx, k], 2), torch.cat([v_ctx, v], 2),
                                               attn_mask=mask,
                                               enable_gqa=c.num_attention_heads != c.num_key_value_heads)
            h = h + a.o_proj(y.transpose(1, 2).reshape(h.shape[0], h.shape[1], -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h)

    def save(self, folder: Path, meta: dict | None = None) -> None:
        state = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in self.state_dict().items()}
        check_checkpoint(self.config, {k: tuple(v.shape) for k, v in state.items()})
        write_checkpoint(folder, state, self.config.to_hf(), meta)

    @classmethod
    def load(cls, folder: str | Path, device="cpu", dtype=torch.float32) -> "DFlashDrafter":
        config, state = read_checkpoint(folder)
        model = cls(DFlashConfig.from_hf(config))
        model.load_state_dict({k: v.float() for k, v in state.items()})
        return model.to(device=device, dtype=dtype).eval()


def expected_weights(c: DFlashConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor vLLM 0.26's DFlash loader fills, with its shape: it does not check that each was loaded, so a
    misnamed one would stay uninitialised in the engine (qwen3_dflash.py ``load_weights``)."""
    H, D, I = c.hidden_size, c.head_dim, c.intermediate_size
    q, kv = c.num_attention_heads * D, c.num_key_value_heads * D
    out = {"fc.weight": (H, len(c.target_layer_ids) * c.target_hidden_size), "hidden_norm.weight": (H,),
           "norm.weight": (H,)}
    for i in range(c.num_hidden_layers):
        p = f"layers.{i}."
        out.update({p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                    p + "self_attn.q_proj.weight": (q, H), p + "self_attn.k_proj.weight": (kv, H),
                    p + "self_attn.v_proj.weight": (kv, H), p + "self_attn.o_proj.weight": (H, q),
                    p + "self_attn.q_norm.weight": (D,), p + "self_attn.k_norm.weight": (D,),
                    p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
                    p + "mlp.down_proj.weight": (H, I)})
    return out


def check_checkpoint(c: DFlashConfig, shapes: dict[str, tuple[int, ...]]) -> None:
    """ValueError unless ``shapes`` (name -> shape of a checkpoint) is exactly what vLLM's loader fills."""
    want = expected_weights(c)
    missing, extra = sorted(set(want) - set(shapes)), sorted(set(shapes) - set(want))
    wrong = sorted(k for k in set(want) & set(shapes) if tuple(shapes[k]) != want[k])
    if missing or extra or wrong:
        raise ValueError(f"DFlash checkpoint does not match vLLM's layout: missing {missing[:5]}, unexpected "
                         f"{extra[:5]}, wrong shape {[(k, shapes[k], want[k]) for k in wrong[:5]]}")


def block_mask(anchors: torch.Tensor, T: int, block: int, causal: bool = False) -> torch.Tensor:
    """[N*block, T + N*block] bool: block j's queries see the context keys at positions < anchors[j] and their
    own block (all of it, or the slots up to their own with ``causal``), never another block."""
    N = len(anchors)
    q_block = torch.arange(N * block, device=anchors.device) // block
    ctx = torch.arange(T, device=anchors.device)[None, :] < anchors[q_block][:, None]
    same = q_block[:, None] == q_block[None, :]
    if causal:
        off = torch.arange(N * block, device=anchors.device) % block
        same = same & (off[None, :] <= off[:, None])
    return torch.cat([ctx, same], 1)


def blocks(seq: torch.Tensor, anchors: torch.Tensor, block: int, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [N*block], positions [N*block]) of the blocks at ``anchors`` in ``seq`` [T]: ids are ``seq[P]`` then
    ``block - 1`` mask tokens, as vLLM's proposer forms them (their labels: :func:`chain_labels`)."""
    off = torch.arange(block, device=seq.device)
    pos = (anchors[:, None] + off[None, :]).reshape(-1)
    ids = torch.full_like(pos, mask_id)
    ids[::block] = seq[anchors]
    return ids, pos


def block_logits(drafter: DFlashDrafter, target, seq: torch.Tensor, anchors: torch.Tensor,
                 block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [N*block, V], labels [N*block]) of the blocks of length ``block`` at ``anchors`` in ``seq`` [T],
    all in one drafter forward over the target's features of ``seq`` (:func:`blocks`, :func:`block_mask`)."""
    return batch_block_logits(drafter, target, [seq], anchors[None], block)


def batch_block_logits(drafter: DFlashDrafter, target, seqs: list[torch.Tensor], anchors: torch.Tensor,
                       block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`block_logits` of several sequences in one target forward and one drafter forward: ``anchors``
    [B, N] (N blocks in each of the B sequences), logits [B*N*block, V] and labels in that order. The sequences
    are right-padded to the longest; a block sees only context before its anchor, so never the padding.

    The labels are the target's own greedy chain from each anchor (:func:`chain_labels`), which is what vLLM
    verifies the drafts against, whatever text the sequence holds after the anchor."""
    c = drafter.config
    T = max(len(s) for s in seqs)
    padded = torch.zeros(len(seqs), T, dtype=seqs[0].dtype, device=seqs[0].device)
    for b, s in enumerate(seqs):
        padded[b, : len(s)] = s
    with torch.no_grad():
        feats, logits = target_features(target, padded, c.aux_layer_ids)              # [B, T, n*H], [B, T, V]
        labels = chain_labels(padded, logits.argmax(-1), torch.tensor([len(s) for s in seqs], device=padded.device),
                              anchors, block)                                           # [B, N*block]
    parts = [blocks(s, a, block, c.mask_token_id) for s, a in zip(seqs, anchors)]
    ids, pos = (torch.stack([p[i] for p in parts]) for i in range(2))                  # [B, N*block] each
    mask = torch.stack([block_mask(a, T, block, c.causal) for a in anchors])           # [B, N*block, T + N*block]
    embed = target.model.embed_tokens.weight
    h = drafter(embed, feats.to(drafter.fc.weight.dtype), ids, pos.clamp(max=c.max_position_embeddings - 1), mask)
    return F.linear(h.reshape(-1, h.shape[-1]), embed), labels.reshape(-1)


def chain_labels(ids: torch.Tensor, pred: torch.Tensor, lengths: torch.Tensor, anchors: torch.Tensor,
                 block: int) -> torch.Tensor:
    """[B, N*block] labels of the blocks at ``anchors`` [B, N] of the sequences ``ids`` [B, T] (``lengths`` [B] of
    them real): offset i >= 1 of the block at P is the target's greedy token at P + i, ``pred[P + i - 1]`` (``pred``
    [B, T]: its argmax after each position), where the sequence up to P + i - 1 is the target's own chain from P
    (``ids[P + j] == pred[P + j - 1]`` for 1 <= j < i: only then is ``pred[P + i - 1]`` what it would generate);
    -100 elsewhere and at offset 0. On the target's greedy continuations every offset has its label; on any text
    (a corpus window) those where the text goes where the target would, so a corpus trains the drafter without
    generating continuations first."""
    B, T = ids.shape
    off = torch.arange(block, device=ids.device)
    at = anchors[:, :, None] + off                                                       # [B, N, block]: P + i
    prev = (at - 1).clamp(0, T - 1)
    label = pred.gather(1, prev.flatten(1)).view_as(at)                                # pred[P + i - 1]
    follows = torch.zeros_like(ids, dtype=torch.bool)
    follows[:, 1:] = ids[:, 1:] == pred[:, :-1]                                          # token t is the target's
    f = follows.gather(1, at.clamp(max=T - 1).flatten(1)).view_as(at)                   # at P + j
    f[:, :, 0] = True
    chain = torch.cumprod(f.long(), -1).roll(1, -1).bool()                              # all of j = 1 .. i-1
    chain[:, :, 0] = False                                                               # offset 0: no label
    chain &= at - 1 < lengths[:, None, None]                                            # pred[P + i - 1] is real
    return torch.where(chain, label, torch.full_like(label, -100)).flatten(1)


OFFSET_DECAY = 0.8           # later drafts count less: they are only used when the earlier ones were accepted


def dflash_loss(drafter: DFlashDrafter, target, seqs: list[tuple[torch.Tensor, int]], n_anchors: int,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, list[float]]:
    """(loss, top-1 agreement per offset) on sequences ``(seq [T], start)`` whose tokens from ``start`` on are the
    target's greedy continuation: ``n_anchors`` blocks in each (drawn with replacement) with their bonus token in
    the continuation, all sequences in one forward."""
    c = drafter.config
    anchors = torch.stack([torch.randint(n, max(n + 1, len(seq) - 1), (n_anchors,), generator=generator)
                           for seq, n in seqs]).to(seqs[0][0].device)                    # [B, n_anchors]
    logits, labels = batch_block_logits(drafter, target, [seq for seq, _ in seqs], anchors, c.block_size)
    logits = logits.float()
    off = torch.arange(len(labels), device=labels.device) % c.block_size
    weight = torch.where(off > 0, OFFSET_DECAY ** (off - 1).clamp(min=0).float(),
                         torch.zeros_like(off, dtype=torch.float))
    ce = F.cross_entropy(logits, labels.clamp(min=0), reduction="none")
    valid = (labels >= 0).float()
    loss = (ce * weight * valid).sum() / (weight * valid).sum().clamp(min=1e-6)
    hit = ((logits.argmax(-1) == labels) & (labels >= 0)).float()
    seen = (labels >= 0).float()
    per_off = torch.stack([torch.zeros(c.block_size, device=labels.device).index_add_(0, off, x) for x in (hit, seen)])
    hits, counts = per_off.tolist()                                     # one sync, not one per offset
    return loss, [h / n if n else math.nan for h, n in zip(hits[1:], counts[1:])]


@torch.no_grad()
def draft_all(drafter: DFlashDrafter, target, seq: torch.Tensor, start: int, k: int) -> torch.Tensor:
    """[N, k] greedy drafts of the blocks at every anchor P in ``start .. T-2`` of ``seq`` (one forward: blocks
    are independent under :func:`block_mask`), each block of length k + 1 as vLLM forms it."""
    anchors = torch.arange(start, len(seq) - 1, device=seq.device)
    logits, _ = block_logits(drafter, target, seq, anchors, k + 1)
    return logits.argmax(-1).view(len(anchors), k + 1)[:, 1:]


def acceptance_report(drafter: DFlashDrafter, target, prompts: list[list[int]], new_tokens: int, eos: int | None,
                      device, k: int | None = None, desc: str = "held-out acceptance (dflash)") -> dict:
    """Drafts of blocks of k + 1 (default: the trained block) along the target's greedy continuations of held-out
    prompts, counted as vLLM counts them (``completer.training.drafter.chain_report``)."""
    from .drafter import chain_report

    k = k or drafter.config.block_size - 1
    return chain_report(lambda seq, start: draft_all(drafter, target, torch.tensor(seq, device=device), start,
                                                     k).tolist(),
                        target, prompts, new_tokens, eos, device, k, desc)


def init_from_target(drafter: DFlashDrafter, target, which: str) -> list[int]:
    """Start the drafter's decoder layers as copies of the target's ``first`` (its bottom layers: the block's
    tokens enter as embeddings, as the target's do) or ``last`` layers, and its final ``norm`` as the target's:
    same widths by construction (:meth:`DFlashConfig.for_target`). ``q_norm`` / ``k_norm``, which the target
    lacks, stay ones; a Qwen2 target's q/k/v biases are not copied (vLLM's DFlash layers have none). Returns the
    target layers copied."""
    n, L = target.config.num_hidden_layers, drafter.config.num_hidden_layers
    if which not in ("first", "last"):
        raise ValueError(f"init must be random, first or last, got {which!r}")
    src = list(range(min(L, n))) if which == "first" else list(range(max(0, n - L), n))
    names = ("input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
             "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
    with torch.no_grad():
        for d, t in zip(drafter.layers, (target.model.layers[i] for i in src)):
            for name in names:
                d.get_submodule(name).weight.copy_(t.get_submodule(name).weight)
        drafter.norm.weight.copy_(target.model.norm.weight)
    return src


def mask_token(tok) -> int:
    """The mask id: ``<|fim_pad|>`` (never in a FIM stream or a prompt), else the tokenizer's pad token."""
    for name in (FIM_PAD, "<|endoftext|>", "<pad>", "<|pad|>"):
        i = tok.token_to_id(name)
        if i is not None:
            return i
    raise ValueError("the target's tokenizer has no <|fim_pad|> or pad token to use as DFlash's mask token")


def length_buckets(prompts: list[list[int]], size: int) -> list[list[list[int]]]:
    """Prompts in groups of ``size`` of neighbouring lengths, each trimmed to its group's shortest by dropping tokens
    after the first (the far end of a FIM prompt's first part; its FIM token stays), so a group is one tensor."""
    order = sorted(prompts, key=len)
    out = []
    for i in range(0, len(order), size):
        group = order[i:i + size]
        n = len(group[0])
        out.append([p[:1] + p[len(p) - n + 1:] if len(p) > n else p for p in group])
    return out


@torch.no_grad()
def greedy_batch(target, prompts: list[list[int]], n: int, eos: int | None) -> list[list[int]]:
    """The target's greedy continuations (up to ``n`` tokens, ending after ``eos``) of equal-length ``prompts``:
    one batched prefill into a KV cache, then one batched one-token step per token (what
    :func:`completer.training.drafter.greedy_continuation` gives one by one; full forwards per token cost the
    prompt's length in compute at every token)."""
    from ..models.llama import KVCache

    p = next(target.parameters())
    ids = torch.tensor(prompts, device=p.device)
    steps = min(n, target.config.max_position_embeddings - ids.shape[1])
    if steps <= 0:
        return [[] for _ in prompts]
    cache = KVCache(target.config, batch=len(prompts), capacity=ids.shape[1] + steps, device=p.device,
                    dtype=p.dtype)
    logits = target(ids, cache=cache, last_only=True)                                     # [B,1,V]
    done = torch.zeros(len(prompts), dtype=torch.bool, device=p.device)
    out = []
    for i in range(steps):
        nxt = logits[:, -1].argmax(-1)                                                    # [B]
        out.append(nxt)
        if eos is not None:
            done |= nxt == eos
            if bool(done.all()):
                break
        if i + 1 < steps:
            logits = target(nxt[:, None], cache=cache)
    conts = torch.stack(out, 1).tolist()
    return [c[: c.index(eos) + 1] if eos is not None and eos in c else c for c in conts]


def text_windows(texts: list[str], tok, args, tc, cfg: DFlashConfig, device) -> list[tuple[torch.Tensor, int]]:
    """``--dflash-data text``: the corpus as FIM samples packed into windows (as the EAGLE-3 trainer and the
    target's own training see it), blocks anchored anywhere in them, labelled with the target's chain
    (:func:`chain_labels`): no continuations to generate, so the whole corpus is there to learn from."""
    import numpy as np

    from .fim import encode_samples, pack

    seq_len = min(args.seq_len or (1024 if device.type == "cuda" else 256),
                  tc.max_position_embeddings - cfg.block_size - 1)
    try:
        stream = encode_samples(texts, tok, seed=args.seed)
    except KeyError as e:
        raise SystemExit(f"completer train-drafter: the target's tokenizer lacks the FIM token {e}")
    data = torch.from_numpy(pack(stream, seq_len - 1).astype(np.int64)).to(device)      # [N, seq_len]
    if len(data) == 0:
        raise SystemExit(f"completer train-drafter: {len(stream)} corpus tokens do not fill one {seq_len}-token window")
    return [(w, 0) for w in data]


def continuations(texts: list[str], tok, args, tc, cfg: DFlashConfig, target, eos: int | None, device, amp,
                  rng) -> list[tuple[torch.Tensor, int]]:
    """``--dflash-data continuations``: FIM prompts from the corpus, each followed by the target's greedy
    continuation (``--gen-tokens``), blocks anchored in the continuation."""
    import sys

    from tqdm import tqdm

    from .drafter import _fim_prompts, greedy_continuation

    n_seq = args.sequences or (4000 if device.type == "cuda" else 200)
    max_len = min(900, tc.max_position_embeddings - args.gen_tokens - cfg.block_size - 1)   # as the report's prompts
    prompts = _fim_prompts(tok, texts, n_seq, rng, max_len, keep=0.6)   # more prompts per MB than a report needs
    if not prompts:
        raise SystemExit("completer train-drafter: no FIM prompts in the corpus")
    seqs = []
    with amp, torch.no_grad():
        if device.type == "cuda":   # batches of similar length: a 10M target is all launch overhead
            bar = tqdm(total=len(prompts), desc="target's greedy continuations", unit="prompt", file=sys.stdout,
                       mininterval=10)
            for group in length_buckets(prompts, args.gen_batch):
                for p, cont in zip(group, greedy_batch(target, group, args.gen_tokens, eos)):
                    if len(cont) >= 2:
                        seqs.append((torch.tensor(p + cont, device=device), len(p)))
                bar.update(len(group))
            bar.close()
        else:
            for p in tqdm(prompts, desc="target's greedy continuations", unit="prompt", file=sys.stdout,
                          mininterval=10):
                cont = greedy_continuation(target, p, args.gen_tokens, eos, device)
                if len(cont) >= 2:
                    seqs.append((torch.tensor(p + cont, device=device), len(p)))
    return seqs


def train(args, target, tok, eos: int | None, device, out: Path, t0: float, argv: list[str]) -> int:
    """``completer train-drafter --method dflash``: greedy continuations of FIM prompts from the corpus (the
    target's own output, which the drafts are verified against), then blocks of ``--block`` at random anchors in
    them for ``--minutes``; saves the drafter, then the held-out report."""
    import platform
    import random
    import time

    from .drafter import _report, train_for
    from .train import corpus_texts

    gpu = device.type == "cuda"
    tc = target.config
    ids = [int(x) for x in args.aux_layers.split(",")] if args.aux_layers else None
    drafter = DFlashDrafter.load(out, device=device) if args.report_only else None      # the one to report on
    cfg = drafter.config if drafter else DFlashConfig.for_target(tc, mask_token(tok), layers=args.layers,
                                                                 target_layer_ids=ids, block_size=args.block,
                                                                 causal=args.causal)
    print(f"DFlash drafter: {cfg.num_hidden_layers} layers, target layers {cfg.target_layer_ids}, block "
          f"{cfg.block_size} (k={cfg.block_size - 1}), mask id {cfg.mask_token_id}, "
          f"{'causal' if cfg.causal else 'bidirectional'} block", flush=True)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if gpu else torch.autocast("cpu", enabled=False)
    if args.report_only:
        meta = json.loads((out / "train_meta.json").read_text()) if (out / "train_meta.json").is_file() else {}
        return _report(drafter, target, tok, eos, args.n_eval, args, tc, device, amp, out, meta, t0,
                       acceptance_report)
    try:
        texts = corpus_texts(args.corpus, int((args.corpus_mb or (60 if gpu else 5)) * 1e6))
    except OSError as e:
        raise SystemExit(f"completer train-drafter: cannot read the corpus: {e}")
    rng = random.Random(args.seed)
    rng.shuffle(texts)
    if args.dflash_data == "text":
        seqs = text_windows(texts, tok, args, tc, cfg, device)
    else:
        seqs = continuations(texts, tok, args, tc, cfg, target, eos, device, amp, rng)
    print(f"{len(seqs)} sequences, {sum(len(s) - n for s, n in seqs)} tokens to anchor blocks in "
          f"({time.time() - t0:.0f}s)", flush=True)
    drafter = DFlashDrafter(cfg).to(device)
    g = torch.Generator().manual_seed(args.seed)
    init_weights(drafter, g)
    if args.dflash_init != "random":
        copied = init_from_target(drafter, target, args.dflash_init)
        print(f"drafter layers start as the target's layers {copied}", flush=True)
    opt = torch.optim.AdamW(drafter.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    batch = args.batch or (32 if gpu else 4)
    anchors = args.anchors or (32 if gpu else 16)

    def batch_loss():
        picked = [seqs[i] for i in torch.randint(len(seqs), (batch,), generator=g).tolist()]
        with amp:                           # the batch in one target forward and one drafter forward
            return dflash_loss(drafter, target, picked, anchors, g)

    step, losses, agree, seconds = train_for(drafter, opt, args, "train-drafter (dflash)",
                                             "top1 vs target by offset", batch_loss)
    drafter.eval()
    meta = {"command": "completer train-drafter " + " ".join(argv), "method": "dflash", "target": args.target,
            "device": torch.cuda.get_device_name(0) if gpu else platform.processor() or "cpu",
            "torch": torch.__version__, "config": cfg.to_hf(), "steps": step, "batch": batch, "anchors": anchors,
            "data": args.dflash_data, "init": args.dflash_init, "sequences": len(seqs),
            **({"gen_tokens": args.gen_tokens} if args.dflash_data == "continuations" else
               {"seq_len": len(seqs[0][0]), "train_tokens": len(seqs) * len(seqs[0][0])}),
            "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None, "train_top1_per_offset": agree,
            "params": sum(p.numel() for p in drafter.parameters()), "seconds_training": seconds}
    drafter.save(out, meta)
    return _report(drafter, target, tok, eos, args.n_eval, args, tc, device, amp, out, meta, t0,
                       acceptance_report)
