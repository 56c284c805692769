"""The engine's own fp16-weight matmul kernel (completer/models/kernels.py, matvec.cpp): same numbers as torch,
the same row whatever the number of rows or threads (lossless speculation compares a decode step with a
verification step), and the model's packed step with it against the float model."""
import pytest
import torch
import torch.nn.functional as F

from completer.models import kernels

ops = kernels.ops()
needs_kernels = pytest.mark.skipif(ops is None, reason=f"kernels not built here: {kernels.reason()}")


def _case(m, k, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g), torch.randn(n, k, generator=g) * 0.05, torch.randn(n, generator=g),
            torch.randn(m, n, generator=g), torch.rand(k, generator=g) + 0.5)


@needs_kernels
@pytest.mark.parametrize("m,k,n", [(1, 320, 448), (1, 768, 320), (4, 320, 1536), (9, 333, 200), (16, 20, 65),
                                   (7, 64, 8192)])
def test_matches_torch(m, k, n):
    x, w, b, r, nw = _case(m, k, n)
    wh = w.half().float()
    p = ops.pack_f16(w)
    torch.testing.assert_close(ops.linear_f16(x, p, n), x @ wh.t(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ops.linear_f16(x, p, n, b, r), x @ wh.t() + b + r, rtol=1e-5, atol=1e-5)
    want = F.rms_norm(x, (k,), nw, 1e-5) @ wh.t() + r
    torch.testing.assert_close(ops.linear_f16(x, p, n, None, r, nw, 1e-5), want, rtol=1e-5, atol=1e-5)
    assert ops.linear_f16(x.view(1, m, k), p, n).shape == (1, m, n)


@needs_kernels
@pytest.mark.parametrize("n", [1536, 320, 448, 8192 + 7, 200])   # split 48:48, 10:10, 14:14, 257:256, not split
def test_rows_independent_of_batch_and_threads(n):
    x, w, b, r, nw = _case(13, 320, n, seed=1)
    p = ops.pack_f16(w)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            whole = ops.linear_f16(x, p, n, b, r, nw, 1e-5)
            for i in range(13):   # bitwise: one row alone == the same row among 13
                assert torch.equal(ops.linear_f16(x[i:i + 1], p, n, b, r[i:i + 1], nw, 1e-5), whole[i:i + 1])
            outs.append(whole)
        assert torch.equal(outs[0], outs[1])
    finally:
        torch.set_num_threads(before)


@needs_kernels
def test_rejects_wrong_inputs():
    p = ops.pack_f16(torch.randn(32, 16))
    with pytest.raises(RuntimeError):
        ops.linear_f16(torch.randn(1, 17), p, 32)          # K mismatch
    with pytest.raises(RuntimeError):
        ops.linear_f16(torch.randn(1, 16), p, 64)          # N beyond the packed rows
    with pytest.raises(RuntimeError):
        ops.linear_f16(torch.randn(1, 16).double(), p, 32)


def test_model_packed_step_matches_float_model():
    """fp16-packed decode and verification steps (kernel when built, else FBGEMM) against the float32 model."""
    from completer.models.llama import LlamaForCausalLM, ModelConfig
    c = ModelConfig(vocab_size=300, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=16, max_position_embeddings=128)
    m = LlamaForCausalLM(c).eval()
    m.init_weights(3)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(p.half().float())          # a 16-bit checkpoint: the packing is then exact in the weights
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ref_cache = m.new_cache(64)
        ref = m(ids, ref_cache)
        m.fuse_().pack_("fp16")
        assert (m.model.layers[0].mlp.packed[0]._kernels is not None) == (ops is not None)
        cache = m.new_cache(64)
        m(ids[:, :30], cache)
        steps = [m(ids[:, i:i + 1], cache) for i in range(30, 34)] + [m(ids[:, 34:40], cache)]   # decode, verify
    torch.testing.assert_close(torch.cat(steps, dim=1), ref[:, 30:], rtol=1e-4, atol=1e-4)


@needs_kernels
@pytest.mark.parametrize("m,k", [(1, 768), (3, 40)])
def test_glu_input(m, k):
    """glu=True: x = [gate, up], the matmul's input is silu(gate) * up (the MLP's down projection)."""
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(m, 2 * k, generator=g) * 4, torch.randn(50, k, generator=g) * 0.05
    gate, up = x.chunk(2, dim=-1)
    want = (F.silu(gate) * up) @ w.half().float().t()
    torch.testing.assert_close(ops.linear_f16(x, ops.pack_f16(w), 50, None, None, None, 0.0, True), want,
                               rtol=1e-4, atol=1e-4)


def _reference_attention(qkv, cos, sin, k_prev, v_prev, H, Hkv, D):
    """The model's own ops: rotary, keys/values appended, causal grouped-query SDPA after the cached positions."""
    T = qkv.shape[0]
    x = qkv.view(T, H + 2 * Hkv, D)
    qk = x[:, :H + Hkv] * cos[:, None] + x[:, :H + Hkv].roll(D // 2, -1) * sin[:, None]
    q, k, v = qk[:, :H], qk[:, H:], x[:, H + Hkv:]
    keys = torch.cat([k_prev, k.transpose(0, 1)], dim=1)          # [Hkv, S, D]
    vals = torch.cat([v_prev, v.transpose(0, 1)], dim=1)
    start, S = k_prev.shape[1], k_prev.shape[1] + T
    mask = torch.arange(S)[None, :] <= (start + torch.arange(T))[:, None]     # [T, S]
    y = F.scaled_dot_product_attention(q.transpose(0, 1)[None], keys[None], vals[None], attn_mask=mask,
                                       enable_gqa=True)            # [1, H, T, D]
    return y[0].transpose(0, 1).reshape(T, H * D), keys, vals


@needs_kernels
@pytest.mark.parametrize("start,T,H,Hkv", [(0, 1, 5, 1), (0, 7, 4, 2), (900, 1, 5, 1), (900, 9, 5, 1),
                                           (127, 2, 4, 4), (300, 16, 6, 2)])
def test_attend_matches_model_ops(start, T, H, Hkv):
    D, cap = 64, 1024
    g = torch.Generator().manual_seed(start + T)
    qkv = torch.randn(T, (H + 2 * Hkv) * D, generator=g)
    ang = torch.rand(T, D // 2, generator=g) * 6
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([-ang.sin(), ang.sin()], -1)
    kc, vc = torch.zeros(Hkv, cap, D), torch.zeros(Hkv, cap, D)
    kc[:, :start], vc[:, :start] = torch.randn(Hkv, start, D, generator=g), torch.randn(Hkv, start, D, generator=g)
    want, keys, vals = _reference_attention(qkv, cos, sin, kc[:, :start].clone(), vc[:, :start].clone(), H, Hkv, D)
    got = ops.attend(qkv, cos, sin, kc, vc, start, H, Hkv)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(kc[:, :start + T], keys, rtol=1e-6, atol=1e-6)   # the new keys/values were written
    torch.testing.assert_close(vc[:, :start + T], vals, rtol=0, atol=0)


@needs_kernels
def test_attend_query_independent_of_step_size_and_threads():
    """A verification step's row t equals the decode step at that position, bitwise, at 1 and 2 threads."""
    H, Hkv, D, start, T = 5, 1, 64, 700, 6
    g = torch.Generator().manual_seed(9)
    qkv = torch.randn(T, (H + 2 * Hkv) * D, generator=g)
    cos, sin = torch.randn(T, D, generator=g), torch.randn(T, D, generator=g)
    base_k, base_v = torch.randn(Hkv, 1024, D, generator=g), torch.randn(Hkv, 1024, D, generator=g)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            kc, vc = base_k.clone(), base_v.clone()
            whole = ops.attend(qkv, cos, sin, kc, vc, start, H, Hkv)
            kc, vc = base_k.clone(), base_v.clone()
            one = torch.cat([ops.attend(qkv[t:t + 1], cos[t:t + 1], sin[t:t + 1], kc, vc, start + t, H, Hkv)
                             for t in range(T)])
            assert torch.equal(whole, one)
            results.append(whole)
        assert torch.equal(results[0], results[1])
    finally:
        torch.set_num_threads(before)


@needs_kernels
def test_layer_step_equals_the_separate_kernels():
    """layer_step (one call per layer) gives bitwise what its five kernels give one by one, cache writes included."""
    g = torch.Generator().manual_seed(4)
    h, inter, H, Hkv, D, start, T = 64, 96, 4, 2, 16, 37, 3
    nq = (H + 2 * Hkv) * D
    w = {n: ops.pack_f16(torch.randn(r, c, generator=g) * 0.1)
         for n, (r, c) in {"qkv": (nq, h), "o": (h, H * D), "gu": (2 * inter, h), "d": (h, inter)}.items()}
    n1, n2 = torch.rand(h, generator=g) + 0.5, torch.rand(h, generator=g) + 0.5
    x, cos, sin = torch.randn(1, T, h, generator=g), torch.randn(T, D, generator=g), torch.randn(T, D, generator=g)
    kc, vc = torch.randn(Hkv, 64, D, generator=g), torch.randn(Hkv, 64, D, generator=g)
    k2, v2 = kc.clone(), vc.clone()
    got = ops.layer_step(x, w["qkv"], nq, None, w["o"], h, w["gu"], 2 * inter, w["d"], h, n1, n2, 1e-5, cos, sin,
                         kc, vc, start, H, Hkv)
    y = ops.attend(ops.linear_f16(x, w["qkv"], nq, None, None, n1, 1e-5), cos, sin, k2, v2, start, H, Hkv)
    x1 = ops.linear_f16(y, w["o"], h, None, x.view(T, h))
    want = ops.linear_f16(ops.linear_f16(x1, w["gu"], 2 * inter, None, None, n2, 1e-5), w["d"], h, None, x1,
                          None, 0.0, True)
    assert got.shape == x.shape
    assert torch.equal(got.view(T, h), want) and torch.equal(kc, k2) and torch.equal(vc, v2)


_CACHED_LOAD = """
import sys, logging
from torch.utils import cpp_extension
if sys.argv[1] == "cached":          # a start with the build cached must not run torch's builder (ninja, setuptools)
    def refuse(*a, **k):
        raise AssertionError("cpp_extension.load ran although the build is cached")
    cpp_extension.load = refuse
logging.basicConfig(level=logging.WARNING)
from completer.models import kernels
assert kernels.ops() is not None, kernels.reason()
print("ok")
"""


@needs_kernels
def test_a_cached_build_loads_directly_and_a_broken_one_is_rebuilt(tmp_path):
    """The cached extension is loaded as a library (no builder: 0.3-0.7 s of every start); a .so cut short (a
    build killed while linking) is built again instead of leaving the engine on torch's ops."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    built = next(Path(p) for p in torch.ops.loaded_libraries if "completer_kernels_" in Path(p).name)
    root = tmp_path / "ext"
    shutil.copytree(built.parent, root / built.parent.name)
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(root)}
    repo = Path(__file__).resolve().parents[3]
    run = lambda mode: subprocess.run([sys.executable, "-c", _CACHED_LOAD, mode], cwd=repo, env=env,   # noqa: E731
                                      capture_output=True, text=True, timeout=600)
    r = run("cached")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
    copy = root / built.parent.name / built.name
    copy.write_bytes(copy.read_bytes()[:4096])                           # a link cut short
    r = run("broken")
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
    assert "building them again" in r.stderr
    assert copy.stat().st_size > 4096


def test_a_build_is_named_for_the_cpu_it_was_compiled_for():
    """-march=native compiles for this CPU: a cache shared with a machine of other instruction sets (an AVX-512
    build on an AVX2 CPU dies of SIGILL) must not find it; other flags name builds by the sources alone."""
    codes = {"matvec.cpp": b"int f();", "kernel_common.h": b"#pragma once"}
    native = ["-O3", "-march=native", "-fopenmp"]
    avx512 = kernels.build_name(codes, native, ["-fopenmp"], cpu=b"avx avx2 avx512f fma")
    avx2 = kernels.build_name(codes, native, ["-fopenmp"], cpu=b"avx avx2 fma")
    assert avx512 != avx2 and avx512.startswith("completer_kernels_")
    assert kernels.build_name(codes, native, ["-fopenmp"], cpu=b"avx avx2 fma") == avx2
    assert kernels.build_name(codes, native, ["-fopenmp"]) == kernels.build_name(codes, native, ["-fopenmp"],
                                                                                  cpu=kernels._cpu_flags())
    plain = ["-O3", "-fopenmp"]
    assert (kernels.build_name(codes, plain, [], cpu=b"avx2") == kernels.build_name(codes, plain, [], cpu=b"sse2"))
    assert kernels.build_name({**codes, "matvec.cpp": b"int g();"}, native, [], cpu=b"avx2") != \
        kernels.build_name(codes, native, [], cpu=b"avx2")
