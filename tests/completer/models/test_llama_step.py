"""The model's inference step (completer/models/llama.py) against a plain reference implementation.

The lean step stacks q/k/v and gate/up into one matmul each, groups the query heads that share a key/value head
instead of repeating the keys, and writes the KV cache in place at a position. These tests hold it to a
textbook Llama forward written out here (separate projections, repeated keys, an explicit causal mask), for a
whole sequence, for a prompt continued on a cache (the typing case), for a (k+1)-token verification step and for
one-token decode steps, and check that rolling the cache back (rejected drafts) and reusing it gives the same
logits as computing from scratch.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from completer.models.llama import LlamaForCausalLM, ModelConfig


def reference_logits(m: LlamaForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    """A Llama forward without cache, written for clarity: [1,T] -> [1,T,V]."""
    c = m.config
    T = ids.shape[1]
    H, Hkv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    cos, sin = m.rope_cos[:T], m.rope_sin[:T]

    def rope(x):                                        # [1,heads,T,D]
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def norm(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps))

    x = m.model.embed_tokens.weight[ids]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for layer in m.model.layers:
        a, mlp = layer.self_attn, layer.mlp
        h = norm(x, layer.input_layernorm.weight)
        q = rope(a.q_proj(h).view(1, T, H, D).transpose(1, 2))
        k = rope(a.k_proj(h).view(1, T, Hkv, D).transpose(1, 2)).repeat_interleave(H // Hkv, dim=1)
        v = a.v_proj(h).view(1, T, Hkv, D).transpose(1, 2).repeat_interleave(H // Hkv, dim=1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        y = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1) @ v
        x = x + a.o_proj(y.transpose(1, 2).reshape(1, T, H * D))
        h = norm(x, layer.post_attention_layernorm.weight)
        x = x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))
    return m.lm_head(norm(x, m.model.norm.weight))


@pytest.fixture(params=[(4, 1, False), (4, 2, True), (2, 2, False)], ids=["gqa4:1", "gqa2:1+bias", "mha"])
def model(request) -> LlamaForCausalLM:
    heads, kv, bias = request.param
    c = ModelConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                    num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=128,
                    attention_bias=bias, model_type="qwen2" if bias else "llama")
    m = LlamaForCausalLM(c)
    m.init_weights(seed=3)
    with torch.no_grad():                               # biases and norms away from their init values
        for name, p in m.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.1)
    return m.eval().fuse_()


TOL = dict(atol=2e-5, rtol=1e-4)


@torch.inference_mode()
def test_whole_sequence_matches_reference(model):
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(model(ids), reference_logits(model, ids), **TOL)


@torch.inference_mode()
def test_cached_steps_match_reference(model):
    """Prompt, then its continuation on the cache, a 5-token verification block, then one-token steps."""
    ids = torch.randint(0, 97, (1, 60), generator=torch.Generator().manual_seed(1))
    ref = reference_logits(model, ids)[0]
    cache = model.new_cache(capacity=16)                # grows while the test runs
    out = [model(ids[:, :30], cache)[0], model(ids[:, 30:37], cache)[0], model(ids[:, 37:42], cache)[0]]
    out += [model(ids[:, i:i + 1], cache)[0] for i in range(42, 60)]
    torch.testing.assert_close(torch.cat(out), ref, **TOL)
    assert cache.length == 60 and cache.tokens == ids[0].tolist()


@torch.inference_mode()
def test_rollback_and_reuse_equal_a_fresh_computation(model):
    """Rejected drafts are forgotten by truncate; writing other tokens there gives the logits of a fresh run."""
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 97, (1, 30), generator=g)
    drafts = torch.randint(0, 97, (1, 6), generator=g)
    other = torch.randint(0, 97, (1, 4), generator=g)
    cache = model.new_cache()
    model(ids, cache)
    model(drafts, cache)                                # a verification whose drafts are then rejected
    cache.truncate(30 + 2)                              # keep two of them
    got = model(other, cache)[0]
    seq = torch.cat([ids, drafts[:, :2], other], dim=1)
    torch.testing.assert_close(got, reference_logits(model, seq)[0, -4:], **TOL)
    assert cache.tokens == seq[0].tolist()


def test_training_path_gets_gradients_into_every_projection(model):
    """With autograd on, the layers use the parameters (not the fused copy), so training still learns."""
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    model(torch.randint(0, 97, (1, 12))).logsumexp(-1).mean().backward()
    for name in ("q_proj", "k_proj", "v_proj"):
        assert getattr(model.model.layers[0].self_attn, name).weight.grad.abs().sum() > 0, name
    assert model.model.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0


@torch.inference_mode()
def test_fused_weights_are_the_parameters_storage(model):
    """fuse_ costs no memory: the parameters are views of the stacked tensors, so a loaded state dict lands in both."""
    a = model.model.layers[1].self_attn
    before = model(torch.tensor([[1, 2, 3]]))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sd["model.layers.1.self_attn.k_proj.weight"].mul_(-1)
    model.load_state_dict(sd)
    assert a.fused[0].data_ptr() == a.q_proj.weight.data_ptr()
    assert not torch.allclose(model(torch.tensor([[1, 2, 3]])), before)


@torch.inference_mode()
def test_unfused_model_gives_the_same_logits(model):
    """A model built in code and never fused (tests, training's evaluation) runs the separate projections."""
    plain = LlamaForCausalLM(model.config)
    plain.load_state_dict(model.state_dict())
    assert plain.model.layers[0].self_attn.fused is None
    ids = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(4))
    cache_a, cache_b = model.new_cache(), plain.new_cache()
    torch.testing.assert_close(plain(ids, cache_b), model(ids, cache_a), **TOL)
    torch.testing.assert_close(plain(ids[:, :3], cache_b), model(ids[:, :3], cache_a), **TOL)


@pytest.mark.parametrize("kind,tol", [("fp16", 1e-3), ("int8", 0.15)])
@torch.inference_mode()
def test_packed_weights_for_small_steps(model, kind, tol):
    """Decode and verification steps on packed weights stay close to float32 (fp16: only the weights' rounding;
    int8: quantisation), and a verification block gives what one-token steps give (lossless speculation)."""
    from completer.models.llama import PackedLinear
    if PackedLinear.available(kind):
        pytest.skip(PackedLinear.available(kind))
    ids = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(5))
    ref = reference_logits(model, ids)[0, 30:]
    model.pack_(kind)
    try:
        cache = model.new_cache()
        model(ids[:, :30], cache)                       # a prompt: float32 matmuls
        block = model(ids[:, 30:35], cache)[0]          # verification: packed
        cache.truncate(30)
        steps = torch.cat([model(ids[:, i:i + 1], cache)[0] for i in range(30, 40)])
    finally:
        model.pack_(None)
    torch.testing.assert_close(steps, ref, atol=tol, rtol=0)
    torch.testing.assert_close(block, steps[:5], atol=1e-4, rtol=1e-4)


def test_unknown_packing_is_a_clear_error(model):
    with pytest.raises(ValueError, match="packing must be one of|unknown weight packing"):
        model.pack_("int3")


@pytest.mark.parametrize("kind", [None, "fp16"])
@torch.inference_mode()
def test_forward_batch_equals_one_request_at_a_time(model, kind):
    """Concurrent requests stepped together (each with its own cache and position) give each one's own logits."""
    from completer.models.llama import PackedLinear
    if kind and PackedLinear.available(kind):
        pytest.skip(PackedLinear.available(kind))
    model.pack_(kind)
    try:
        g = torch.Generator().manual_seed(6)
        prompts = [torch.randint(0, 97, (1, n), generator=g) for n in (5, 17, 30)]
        solo, batch = [model.new_cache() for _ in prompts], [model.new_cache() for _ in prompts]
        for p, a, b in zip(prompts, solo, batch):
            model(p, a)
            model(p, b)
        nxt = torch.randint(0, 97, (3, 4), generator=g)
        for t in range(4):
            want = torch.cat([model(nxt[i:i + 1, t:t + 1], solo[i])[0, -1:] for i in range(3)])
            got = model.forward_batch(nxt[:, t], batch)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        assert [c.tokens for c in batch] == [c.tokens for c in solo]
    finally:
        model.pack_(None)


@pytest.mark.parametrize("kind", [None, "fp16"])
@torch.inference_mode()
def test_forward_packed_equals_each_sequence_alone(model, kind):
    """Sequences of different lengths (a decode step, a (k+1)-token verification, a draft's catch-up) packed into
    one forward, each on its own cache, give each sequence the logits its own forward gives, and the same caches;
    with the engine's kernels bitwise (they compute every row alone), which greedy speculation relies on."""
    from completer.models import kernels
    from completer.models.llama import PackedLinear
    if kind and PackedLinear.available(kind):
        pytest.skip(PackedLinear.available(kind))
    model.pack_(kind)
    try:
        g = torch.Generator().manual_seed(7)
        prompts = [torch.randint(0, 97, (1, n), generator=g) for n in (5, 17, 30, 9)]
        solo, batch = [model.new_cache() for _ in prompts], [model.new_cache() for _ in prompts]
        for p, a, b in zip(prompts, solo, batch):
            model(p, a)
            model(p, b)
        exact = kind == "fp16" and kernels.ops() is not None and model.config.head_dim % 16 == 0
        for lens in ((1, 5, 3, 2), (4, 1, 1, 6), (1, 1, 1, 1)):
            seqs = [torch.randint(0, 97, (n,), generator=g).tolist() for n in lens]
            for last_only in (False, True):
                want = [model(torch.tensor([s]), c, last_only=last_only)[0] for s, c in zip(seqs, solo)]
                got = model.forward_packed(seqs, batch, last_only=last_only)
                assert [w.shape for w in want] == [x.shape for x in got]
                for w, x in zip(want, got):
                    if exact:
                        assert torch.equal(w, x)
                    else:
                        torch.testing.assert_close(x, w, atol=1e-5, rtol=1e-5)
                assert [c.tokens for c in batch] == [c.tokens for c in solo]
                assert [c.length for c in batch] == [c.length for c in solo]
                for c in solo + batch:              # roll back (as a rejected draft), then the next round
                    c.truncate(c.length - 1)
        if exact:                                   # the caches' keys and values too
            assert all(torch.equal(a.k[:, :, :, :a.length], b.k[:, :, :, :b.length]) and
                       torch.equal(a.v[:, :, :, :a.length], b.v[:, :, :, :b.length]) for a, b in zip(solo, batch))
    finally:
        model.pack_(None)
