"""An EAGLE-3 drafter for a Llama/Qwen2 target, in the checkpoint layout vLLM's ``method: "eagle3"`` loads.

Why: a separate small draft model costs ~0.4 of a 7B target step on the H200 (its own layers, its own launches), so
``draft_model`` speculation barely pays there. EAGLE-3 (Li et al. 2025, arXiv 2503.01840) drafts with ONE decoder
layer that reads the target's own hidden states from three depths (low, mid, high) plus the embedding of the next
token, so a draft step is a small fraction of a target step, and vLLM keeps async scheduling for it.

Architecture (exactly what ``vllm/model_executor/models/llama_eagle3.py`` of vLLM 0.26 computes):
- first draft step at position p: ``g = fc(cat(h_a, h_b, h_c))`` of the target's residual stream after layers a, b, c
  (``eagle_aux_hidden_state_layer_ids``; id k = after k layers) at p, and the token at p + 1;
- the layer: ``x = cat(input_layernorm(embed(token)), hidden_norm(g))``; attention over ``x`` (q/k/v from 2H);
  ``residual = g + attn``; ``residual += mlp(post_attention_layernorm(residual))``; logits from
  ``lm_head(norm(residual))`` over a draft vocabulary (``d2t`` maps draft id i to target id i + d2t[i]);
- later steps feed the drafted token and ``residual`` (pre-norm) of the previous step at the next position.
The embedding is the target's (not saved: vLLM shares the target's ``embed_tokens``).

Training-time test (the "TTT" of EAGLE-3): each batch runs the layer ``steps`` times; step j at index p sees the
target-derived keys at positions <= p (causal) and its own earlier steps' keys at index p (diagonal), so training
sees its own hidden states as vLLM's draft loop does. Loss: cross-entropy to the target's next-token distribution
(restricted to the draft vocabulary), weighted 0.8**j. Inputs are FIM samples as in the house training.

Held-out report: the target continues held-out FIM prompts greedily; along those continuations the drafter's greedy
chain is checked against the target's tokens, giving acceptance per draft position as vLLM counts it (drafts accepted
at position j / drafts) and the expected tokens per verification step for each k (per language with ``--heldout``).

Corpus: this machine's Python files (how ``house:eagle3`` for house v1 was made), or with ``--corpus ARCHIVE`` the
archive a target was trained on (``python -m completer.training.corpus build``, read as ``completer train --corpus``
reads it), so the drafter sees its target's language mix; ``--heldout ARCHIVE`` draws the report's prompts from
that archive's held-out split, per language. A packed target (house:v2/target's int4 ``model.quant``) is
dequantised by ``resolve_model`` into the same float folder the vLLM backend serves, so the drafter learns the
hidden states of the weights vLLM runs (bf16 on a GPU, as vLLM's ``dtype="auto"`` runs that float32 folder).

``--method dflash`` trains a DFlash drafter instead (all k drafts in one forward; ``completer.training.dflash``).
The command itself is ``completer.training.train_drafter``.

    completer train-drafter --target completer/models/house/target --out completer/models/house/eagle3 --minutes 4
    completer train-drafter --target house:v2/target --corpus .corpus/train.jsonl.xz \
        --heldout .corpus/heldout.jsonl.xz --out completer/models/house/v2/eagle3 --minutes 4
"""

from __future__ import annotations

import json
import math
import platform
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models.llama import MLP, LlamaForCausalLM, RMSNorm, apply_rope

ARCHITECTURE = "LlamaForCausalLMEagle3"


@dataclass
class DrafterConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int                       # the target's
    draft_vocab_size: int
    target_hidden_size: int
    aux_layer_ids: list[int] = field(default_factory=list)
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048

    @classmethod
    def for_target(cls, t, aux_layer_ids: list[int] | None = None, draft_vocab_size: int | None = None,
                   intermediate_size: int | None = None) -> "DrafterConfig":
        """The shape vLLM expects: hidden size, heads and RoPE of the target (the embedding is shared)."""
        n = t.num_hidden_layers
        ids = sorted(aux_layer_ids) if aux_layer_ids else default_aux_layers(n)
        if len(set(ids)) != len(ids) or ids[0] < 0 or ids[-1] > n:
            raise ValueError(f"aux layer ids must be distinct integers in 0..{n} (id k = after k layers), got {ids}")
        dv = draft_vocab_size or t.vocab_size
        if not 1 <= dv <= t.vocab_size:
            raise ValueError(f"draft vocabulary must be 1..{t.vocab_size}, got {dv}")
        return cls(hidden_size=t.hidden_size, intermediate_size=intermediate_size or t.intermediate_size,
                   num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
                   head_dim=t.head_dim, vocab_size=t.vocab_size, draft_vocab_size=dv, target_hidden_size=t.hidden_size,
                   aux_layer_ids=ids, rms_norm_eps=t.rms_norm_eps, rope_theta=t.rope_theta,
                   max_position_embeddings=t.max_position_embeddings)

    def to_hf(self) -> dict:
        """config.json as vLLM's EAGLE-3 loader reads it (a Llama config with the EAGLE-3 keys)."""
        return {
            "architectures": [ARCHITECTURE], "model_type": "llama", "num_hidden_layers": 1,
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "vocab_size": self.vocab_size, "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": self.target_hidden_size, "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta, "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "max_position_embeddings": self.max_position_embeddings, "hidden_act": "silu",
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16",
            "eagle_aux_hidden_state_layer_ids": self.aux_layer_ids,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": self.aux_layer_ids, "use_aux_hidden_state": True},
        }

    @classmethod
    def from_hf(cls, d: dict) -> "DrafterConfig":
        if ARCHITECTURE not in (d.get("architectures") or []):
            raise ValueError(f"not an EAGLE-3 drafter config (architectures {d.get('architectures')})")
        return cls(hidden_size=d["hidden_size"], intermediate_size=d["intermediate_size"],
                   num_attention_heads=d["num_attention_heads"], num_key_value_heads=d["num_key_value_heads"],
                   head_dim=d.get("head_dim") or d["hidden_size"] // d["num_attention_heads"],
                   vocab_size=d["vocab_size"], draft_vocab_size=d.get("draft_vocab_size") or d["vocab_size"],
                   target_hidden_size=d.get("target_hidden_size", d["hidden_size"]),
                   aux_layer_ids=list(d["eagle_aux_hidden_state_layer_ids"]), rms_norm_eps=d["rms_norm_eps"],
                   rope_theta=d.get("rope_theta", 10000.0), max_position_embeddings=d["max_position_embeddings"])


def default_aux_layers(n: int) -> list[int]:
    """Low, middle and high: after layer 2, after half the layers, after the last layer (EAGLE-3's three depths;
    vLLM's own default ends at n-3, the last layer carries the most about the next tokens in a shallow target)."""
    ids = sorted({min(2, n), max(1, n // 2), n})
    return ids if len(ids) == 3 else list(range(max(0, n - 2), n + 1))


class _Attention(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.c = c
        q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        self.q_proj = nn.Linear(2 * c.hidden_size, q, bias=False)
        self.k_proj = nn.Linear(2 * c.hidden_size, kv, bias=False)
        self.v_proj = nn.Linear(2 * c.hidden_size, kv, bias=False)
        self.o_proj = nn.Linear(q, c.hidden_size, bias=False)


class _MidLayer(nn.Module):  # "midlayer." in the checkpoint (vLLM maps it to layers.0)
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = _Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)  # the target's MLP: same parameter names, one implementation


class Eagle3Drafter(nn.Module):
    def __init__(self, config: DrafterConfig):
        super().__init__()
        c = self.config = config
        self.fc = nn.Linear(len(c.aux_layer_ids) * c.target_hidden_size, c.hidden_size, bias=False)
        self.midlayer = _MidLayer(c)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(c.vocab_size, dtype=torch.bool))
        cos, sin = rope(c.head_dim, c.rope_theta, c.max_position_embeddings)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def set_vocab(self, draft_ids: torch.Tensor) -> None:
        """Draft vocabulary = these target ids (ascending); d2t/t2d as EAGLE-3 checkpoints store them."""
        ids = draft_ids.to(self.d2t.device).long().sort().values
        self.d2t.copy_(ids - torch.arange(len(ids), device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True

    def draft_ids(self) -> torch.Tensor:
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def layer(self, emb, hid, pos, past_k: list, past_v: list):
        """One pass of the decoder layer over T indices. ``pos`` [T] positions of the queries; ``past_k/v`` the
        keys/values of the earlier unrolled steps ([B,Hkv,T,D] each; step 0's are attended causally, later ones at
        the same index only). Returns (normed [B,T,H] for logits, pre-norm residual = next step's hidden, k, v)."""
        c, m = self.config, self.midlayer
        B, T, _ = emb.shape
        x = torch.cat([m.input_layernorm(emb), m.hidden_norm(hid)], -1)
        a = m.self_attn
        q = a.q_proj(x).view(B, T, c.num_attention_heads, c.head_dim).transpose(1, 2)
        k = a.k_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        v = a.v_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        cos, sin = self.rope_cos[pos], self.rope_sin[pos]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        keys, values = torch.cat(past_k + [k], 2), torch.cat(past_v + [v], 2)          # [B,Hkv,(j+1)T,D]
        rep = c.num_attention_heads // c.num_key_value_heads
        if rep > 1:
            keys, values = keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1)
        i = torch.arange(T, device=emb.device)
        causal = i[None, :] <= i[:, None]
        diag = torch.eye(T, dtype=torch.bool, device=emb.device)
        mask = torch.cat([causal] + [diag] * len(past_k), 1) if past_k else causal
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        residual = hid + a.o_proj(y.transpose(1, 2).reshape(B, T, -1))
        residual = residual + m.mlp(m.post_attention_layernorm(residual))
        return self.norm(residual), residual, k, v

    def unrolled(self, embed: nn.Embedding, tokens: torch.Tensor, feats: torch.Tensor, steps: int) -> list:
        """Training-time test: draft logits [B,T,Vd] of steps 0..steps-1. Step j at index p reads the token at
        p + j + 1 (teacher-forced) at position p + j and predicts the token at p + j + 2."""
        B, T = tokens.shape
        hid = self.fc(feats)
        ks, vs, out = [], [], []
        base = torch.arange(T, device=tokens.device)
        for j in range(steps):
            inp = F.pad(tokens[:, j + 1:], (0, j + 1))
            pos = (base + j).clamp(max=self.config.max_position_embeddings - 1)
            normed, hid, k, v = self.layer(embed(inp), hid, pos, ks, vs)
            ks.append(k), vs.append(v)
            out.append(self.lm_head(normed))
        return out

    # --- checkpoint ---------------------------------------------------------------------------------------
    def save(self, folder: Path, meta: dict | None = None) -> None:
        """The checkpoint as vLLM loads it. ``d2t``/``t2d`` only for a draft vocabulary smaller than the target's:
        with the target's own vocabulary they map every id to itself, and vLLM (0.32) refuses them there ("There
        is no module or parameter named 'draft_id_to_target_id' in Eagle3LlamaForCausalLM")."""
        own_vocab = self.config.draft_vocab_size == self.config.vocab_size
        state = {k: (v.detach().cpu().contiguous() if k in ("d2t", "t2d") else
                     v.detach().to("cpu", torch.bfloat16).contiguous())
                 for k, v in self.state_dict().items() if not (own_vocab and k in ("d2t", "t2d"))}
        write_checkpoint(folder, state, self.config.to_hf(), meta)

    @classmethod
    def load(cls, folder: str | Path, device="cpu", dtype=torch.float32) -> "Eagle3Drafter":
        config, state = read_checkpoint(folder)
        model = cls(DrafterConfig.from_hf(config))
        state = {k: v if k in ("d2t", "t2d") else v.float() for k, v in state.items()}
        if model.config.draft_vocab_size == model.config.vocab_size:   # saved without them: the identity map
            state.setdefault("d2t", model.d2t.clone())
            state.setdefault("t2d", model.t2d.clone())
        model.load_state_dict(state)
        return model.to(device=device, dtype=dtype).eval()


def set_lr(opt, base: float, frac: float) -> None:
    """The learning rate at ``frac`` of the time budget: 3% warm-up, then cosine from ``base`` down to 0.1x."""
    lr = base * (frac / 0.03 if frac < 0.03 else 0.1 + 0.45 * (1 + math.cos(math.pi * (frac - 0.03) / 0.97)))
    for grp in opt.param_groups:
        grp["lr"] = lr


def time_bar(budget: float, desc: str):
    """A progress bar over the training's seconds (its ETA is the budget left), on stdout."""
    from tqdm import tqdm

    return tqdm(total=int(budget), unit="s", desc=desc, file=sys.stdout, mininterval=10,
                bar_format="{l_bar}{bar}| {n}/{total}s [{elapsed}<{remaining}] {postfix}")


@torch.no_grad()
def init_weights(drafter: torch.nn.Module, g: torch.Generator) -> None:
    """Both trainers' starting point: norms (1-D weights) at one, matrices N(0, 0.02) from ``g``."""
    for p in drafter.parameters():
        p.copy_(torch.ones_like(p) if p.dim() == 1 else torch.randn(p.shape, generator=g).to(p) * 0.02)


def train_for(drafter, opt, args, desc: str, label: str, batch_loss) -> tuple[int, list[float], list[float], float]:
    """The training loop of both drafter trainers: ``batch_loss()`` -> (loss, top-1 agreement per draft position)
    of one batch, for ``args.minutes`` (or ``args.max_steps`` steps), under the learning-rate schedule, gradients
    clipped to 1, progress (``label`` before the agreement) and ETA on a bar. Returns (steps, the loss every 10
    steps, the agreement then last reported, seconds)."""
    budget, start, step, losses, agree = args.minutes * 60, time.time(), 0, [], []
    bar = time_bar(budget, desc)
    while (elapsed := time.time() - start) < budget and (args.max_steps is None or step < args.max_steps):
        set_lr(opt, args.lr, elapsed / budget)
        opt.zero_grad(set_to_none=True)
        loss, ag = batch_loss()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 10 == 0 or step == 1:
            losses.append(loss.item())
            agree = ag
            bar.n = int(time.time() - start)
            bar.set_postfix_str(f"step {step} loss {losses[-1]:.3f} {label} " + "/".join(f"{a:.2f}" for a in ag[:4]))
    bar.n = int(min(budget, time.time() - start))
    bar.close()
    return step, losses, agree, time.time() - start


def write_checkpoint(folder: Path, state: dict, config: dict, meta: dict | None = None) -> None:
    """A drafter folder as vLLM loads it: ``state`` as model.safetensors, ``config`` as config.json, and
    train_meta.json when ``meta`` is given."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if meta is not None:
        (folder / "train_meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def read_checkpoint(folder: str | Path) -> tuple[dict, dict]:
    """(config.json, tensors of model.safetensors) of a drafter folder."""
    from safetensors.torch import load_file

    folder = Path(folder)
    return json.loads((folder / "config.json").read_text()), load_file(str(folder / "model.safetensors"))


def target_features(target: LlamaForCausalLM, ids: torch.Tensor, aux_ids: list[int]):
    """(aux hidden states [B,T,len(aux)*H] as vLLM's EAGLE-3 hook takes them: the residual stream after k layers,
    in layer order; logits [B,T,V]) of one full causal forward of the target over ``ids``.

    Written from the target's parameters (Hugging Face names) rather than through its layer modules, whose call
    signature is an implementation detail of the embedded engine's fast path."""
    c = target.config
    B, T = ids.shape
    cos, sin = rope(c.head_dim, c.rope_theta, T, ids.device)
    H, Hkv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    x = F.embedding(ids, target.model.embed_tokens.weight)
    aux = [x] if 0 in aux_ids else []
    for i, layer in enumerate(target.model.layers):
        a, m = layer.self_attn, layer.mlp
        h = F.rms_norm(x, (c.hidden_size,), layer.input_layernorm.weight, layer.input_layernorm.eps)
        q = F.linear(h, a.q_proj.weight, a.q_proj.bias).view(B, T, H, D).transpose(1, 2)
        k = F.linear(h, a.k_proj.weight, a.k_proj.bias).view(B, T, Hkv, D).transpose(1, 2)
        v = F.linear(h, a.v_proj.weight, a.v_proj.bias).view(B, T, Hkv, D).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=H != Hkv)
        x = x + F.linear(y.transpose(1, 2).reshape(B, T, H * D), a.o_proj.weight)
        h = F.rms_norm(x, (c.hidden_size,), layer.post_attention_layernorm.weight, layer.post_attention_layernorm.eps)
        x = x + F.linear(F.silu(F.linear(h, m.gate_proj.weight)) * F.linear(h, m.up_proj.weight), m.down_proj.weight)
        if i + 1 in aux_ids:
            aux.append(x)
    norm = target.model.norm
    return torch.cat(aux, -1), F.linear(F.rms_norm(x, (c.hidden_size,), norm.weight, norm.eps), target.lm_head.weight)


def rope(head_dim: int, theta: float, n: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables [n, head_dim] in the rotate-half layout (Hugging Face's, vLLM's neox style)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    freqs = torch.outer(torch.arange(n, dtype=torch.float32, device=device), inv)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos(), emb.sin()


STEP_WEIGHT = 0.8


def ttt_loss(drafter, target, w: torch.Tensor, steps: int, draft_ids: torch.Tensor | None):
    """(loss, per-step top-1 agreement with the target) for windows ``w`` [B,T]."""
    with torch.no_grad():
        feats, tlogits = target_features(target, w, drafter.config.aux_layer_ids)
        if draft_ids is not None:
            tlogits = tlogits[..., draft_ids]
        tprob = F.softmax(tlogits.float(), -1)
    outs = drafter.unrolled(target.model.embed_tokens, w, feats.to(drafter.fc.weight.dtype), steps)
    T = w.shape[1]
    loss, agree = 0.0, []
    for j, logits in enumerate(outs):
        n = T - 2 - j                                       # indices p with a label at p + j + 1 <= T - 1
        if n <= 0:
            break
        lp = F.log_softmax(logits[:, :n].float(), -1)
        pt = tprob[:, j + 1: j + 1 + n]
        loss = loss + STEP_WEIGHT ** j * -(pt * lp).sum(-1).mean()
        agree.append((lp.argmax(-1) == pt.argmax(-1)).float().mean().item())
    return loss, agree


@torch.no_grad()
def greedy_continuation(target, prompt: list[int], n: int, eos: int | None, device) -> list[int]:
    cache = target.new_cache(capacity=len(prompt) + n + 1)
    logits = target(torch.tensor([prompt], device=device), cache=cache, last_only=True)
    out = []
    for _ in range(n):
        t = int(logits[0, -1].argmax())
        out.append(t)
        if t == eos or cache.length + 1 >= target.config.max_position_embeddings:
            break
        logits = target(torch.tensor([[t]], device=device), cache=cache)
    return out


@torch.no_grad()
def acceptance_report(drafter, target, prompts: list[list[int]], new_tokens: int, eos: int | None, device,
                      k_max: int = 8, desc: str = "held-out acceptance") -> dict:
    """Greedy drafts along the target's own greedy continuations of held-out prompts, counted as vLLM counts them
    (:func:`chain_report`): the unrolled drafter's chain from every continuation token."""
    dmap = drafter.draft_ids()

    def drafts_for(seq: list[int], start: int) -> list[list[int]]:
        w = torch.tensor([seq], device=device)
        feats, _ = target_features(target, w, drafter.config.aux_layer_ids)
        outs = drafter.unrolled(target.model.embed_tokens, w, feats.to(drafter.fc.weight.dtype), k_max)
        preds = [dmap[o[0].argmax(-1)].tolist() for o in outs]            # target ids, [T] per step
        # step j at index P - 1 reads the token at P (the verified one) and drafts the token at P + j + 1
        return [[preds[j][P - 1] for j in range(k_max)] for P in range(start, len(seq) - 1)]

    return chain_report(drafts_for, target, prompts, new_tokens, eos, device, k_max, desc)


def chain_report(drafts_for, target, prompts: list[list[int]], new_tokens: int, eos: int | None, device, k: int,
                 desc: str) -> dict:
    """The held-out report of a drafter: for each prompt the target's greedy continuation ``seq``, and
    ``drafts_for(seq, len(prompt))``: for every continuation token P from the first to the second last, the k
    drafts of tokens P+1..P+k (a verification step could start at any of them). Counted as vLLM counts them:
    accepted_per_position[i] = chains whose first i+1 drafts all equal the target's tokens."""
    from tqdm import tqdm

    drafted, accepted = [0] * k, [0] * k
    for prompt in tqdm(prompts, desc=desc, unit="prompt", file=sys.stdout, mininterval=10):
        cont = greedy_continuation(target, prompt, new_tokens, eos, device)
        if len(cont) < 2:
            continue
        seq = prompt + cont
        for P, row in enumerate(drafts_for(seq, len(prompt)), start=len(prompt)):
            ok = True
            for i, d in enumerate(row[:k]):
                if P + i + 1 >= len(seq):
                    break
                drafted[i] += 1
                ok = ok and d == seq[P + i + 1]
                accepted[i] += ok
    return summarise(drafted, accepted, len(prompts), new_tokens)


def summarise(drafted: list[int], accepted: list[int], prompts: int, new_tokens: int) -> dict:
    """The report of counts per draft position: acceptance (cumulative, as vLLM counts it), conditional acceptance
    and the expected tokens per verification step for each k."""
    k_max = len(drafted)
    cum = [a / d if d else None for a, d in zip(accepted, drafted)]
    cond = [(cum[j] / cum[j - 1] if j and cum[j - 1] else cum[j]) for j in range(k_max)]
    expected = {}
    for k in range(1, k_max + 1):
        expected[str(k)] = 1 + sum(c for c in cum[:k] if c is not None)
    return {"prompts": prompts, "max_new_tokens": new_tokens, "drafted_per_position": list(drafted),
            "accepted_per_position": list(accepted), "acceptance_per_position": cum,
            "conditional_acceptance_per_position": cond, "expected_tokens_per_step": expected}


def language_reports(drafter, target, groups: dict[str, list[list[int]]], new_tokens: int, eos: int | None,
                     device, report=acceptance_report) -> dict:
    """The drafter's acceptance report (``report``: EAGLE-3's :func:`acceptance_report`, or DFlash's own) over the
    prompts of every language together, with each language's own report under ``by_language``."""
    by_lang = {lang: report(drafter, target, prompts, new_tokens, eos, device, desc=f"held-out {lang}")
               for lang, prompts in groups.items()}
    reports = list(by_lang.values())
    k_max = len(reports[0]["drafted_per_position"]) if reports else 8
    total = summarise([sum(r["drafted_per_position"][j] for r in reports) for j in range(k_max)],
                      [sum(r["accepted_per_position"][j] for r in reports) for j in range(k_max)],
                      sum(r["prompts"] for r in reports), new_tokens)
    if len(by_lang) > 1:
        total["by_language"] = by_lang
    return total


def heldout_prompts(tok, n: int, seed: int, max_len: int) -> list[list[int]]:
    """``n`` FIM prompts (PSM, cut as the house training cuts them) from this machine's Python held-out files,
    middle removed."""
    from . import corpus

    return _fim_prompts(tok, (t for _, t in corpus.iter_texts("heldout", 20_000_000)), n, random.Random(seed),
                        max_len)


def heldout_prompts_by_language(tok, n: int, seed: int, max_len: int,
                                archive: str | None = None) -> dict[str, list[list[int]]]:
    """Held-out FIM prompts by language: ``n`` per language from a held-out corpus archive (``--heldout``; its
    files in a seeded order), else :func:`heldout_prompts` (``python-local``)."""
    from . import corpus

    if archive is None:
        return {"python-local": heldout_prompts(tok, n, seed, max_len)}
    rng = random.Random(seed)
    by_lang: dict[str, list[str]] = {}
    for _, lang, text in corpus.read_archive(archive):
        by_lang.setdefault(lang, []).append(text)
    out = {}
    for lang in sorted(by_lang):
        texts = by_lang[lang]
        rng.shuffle(texts)
        out[lang] = _fim_prompts(tok, texts, n, rng, max_len)
    return out


def _fim_prompts(tok, texts, n: int, rng: random.Random, max_len: int, keep: float = 0.3) -> list[list[int]]:
    """Up to ``n`` FIM prompts of at most ``max_len`` tokens, one from each of a random ``keep`` share of the
    texts' chunks."""
    from ..models.tokenizer import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
    from .fim import chunks, fim_ids, split_fim

    ids = {t: tok.token_to_id(t) for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)}
    out = []
    for text in texts:
        for ch in chunks(text):
            if rng.random() > keep:
                continue
            p, _, s = split_fim(ch, rng)
            if None in ids.values():
                prompt = tok.encode(p, add_special_tokens=False).ids
            else:
                prompt = fim_ids(tok, tok.encode(p, add_special_tokens=False).ids,
                                 tok.encode(s, add_special_tokens=False).ids, "psm")
            if 8 <= len(prompt) <= max_len:
                out.append(prompt)
            if len(out) >= n:
                return out
    return out


def choose_draft_vocab(stream: np.ndarray, vocab: int, size: int) -> torch.Tensor:
    """The ``size`` most frequent target ids in the training stream (ids 0..5 — EOS and FIM tokens — always in)."""
    counts = np.bincount(stream.astype(np.int64), minlength=vocab)[:vocab]
    counts[: min(6, vocab)] = counts.max() + 1
    return torch.from_numpy(np.sort(np.argsort(-counts, kind="stable")[:size]))


def _report(drafter, target, tok, eos, n_eval, args, tc, device, amp, out: Path, meta: dict, t0: float,
            report_for=acceptance_report) -> int:
    """The held-out acceptance report of a trained drafter (``report_for``: its method's report) into
    ``out/train_meta.json``, shared by the EAGLE-3 and the DFlash training."""
    if n_eval <= 0:
        print(f"wrote {out}/config.json, model.safetensors, train_meta.json ({time.time() - t0:.0f}s); no held-out "
              f"report (--eval-prompts 0): run the same command with --report-only for it", flush=True)
        return 0
    print(f"acceptance report on {n_eval} held-out FIM prompts" + (" per language" if args.heldout else "") + " ...",
          flush=True)
    groups = heldout_prompts_by_language(tok, n_eval, args.seed + 7, max_len=min(900, tc.max_position_embeddings - 64),
                             archive=args.heldout)
    with amp:
        report = language_reports(drafter, target, groups, args.eval_tokens, eos, device, report_for)
    report["heldout"] = args.heldout or "this machine's Python held-out split"
    report["command"] = "completer train-drafter " + " ".join(sys.argv[1:])
    report["device"] = torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor() or "cpu"
    meta.update(heldout=report, seconds_total=time.time() - t0)
    (out / "train_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    acc = ", ".join(f"{a:.2f}" for a in report["acceptance_per_position"] if a is not None)
    print(f"held-out greedy acceptance per position (vLLM's count): {acc}", flush=True)
    for lang, r in report.get("by_language", {}).items():
        print(f"  {lang}: " + ", ".join(f"{a:.2f}" for a in r["acceptance_per_position"] if a is not None), flush=True)
    print("expected tokens per step by k: " + ", ".join(f"k={k} {v:.2f}" for k, v in
                                                         report["expected_tokens_per_step"].items()), flush=True)
    print(f"wrote {out}/config.json, model.safetensors, train_meta.json ({time.time() - t0:.0f}s)", flush=True)
    return 0

