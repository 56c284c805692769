"""The engine's kernel for GGUF's 4/8-bit blocks (completer/models/qmatvec.cpp: linear_q) against the dequantised
weights: the same products to the rounding of the int8 input (llama.cpp's Q8_1), exactly the same numbers for a row
whatever the number of rows or threads (lossless speculation), the layout written by models/quant.py's pack_q, and
the blocks read from a real GGUF file."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from completer.models import kernels
from completer.models.blocks import GGUF_BLOCKS, dequantise_q, gguf_blocks, pack_q, unpack_rows

ops = kernels.ops()
needs_kernels = pytest.mark.skipif(ops is None, reason=f"kernels not built here: {kernels.reason()}")


def _blocks(n, k, bits, seed=0):
    g = torch.Generator().manual_seed(seed)
    u = torch.randint(0, 2 ** bits, (n, k), generator=g, dtype=torch.uint8)
    d = (torch.rand(n, k // 32, generator=g) * 0.02 + 0.001).half()
    m = (-d.float() * (2 ** (bits - 1)) + torch.randn(n, k // 32, generator=g) * 0.002).half()
    return u, d, m


def _q8_reference(x, w):
    """x @ w.T with x rounded as the kernel rounds it (int8 per block of 32, scale max|x|/127)."""
    xb = x.view(x.shape[0], -1, 32)
    dx = xb.abs().amax(-1, keepdim=True) / 127
    q = torch.where(dx > 0, torch.round(xb / torch.where(dx > 0, dx, 1)), 0)
    return (q * dx).view_as(x) @ w.t()


@needs_kernels
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("m,k,n", [(1, 576, 960), (1, 1536, 576), (3, 64, 40), (9, 96, 200), (17, 576, 33),
                                   (8, 32, 16)])
def test_matches_dequantised_weights(bits, m, k, n):
    u, d, mn = _blocks(n, k, bits)
    w = dequantise_q(u, d, mn)
    g = torch.Generator().manual_seed(1)
    x, b, r = torch.randn(m, k, generator=g), torch.randn(n, generator=g), torch.randn(m, n, generator=g)
    packed = pack_q(u, d, mn, bits)
    got = ops.linear_q(x, *packed, n, bits)
    # the only rounding beyond float32 sums is the input's int8: against that reference, float32 agreement
    torch.testing.assert_close(got, _q8_reference(x, w), rtol=1e-4, atol=1e-3)
    # against the unrounded input: the int8 rounding's error, well under 1% of the output's scale
    exact = x @ w.t()
    assert (got - exact).abs().max() < 0.01 * exact.abs().max()
    torch.testing.assert_close(ops.linear_q(x, *packed, n, bits, b, r), got + b + r, rtol=1e-5, atol=1e-5)
    # the fused norm / silu(gate)*up: torch's float32 differs in the last bit, which can move an int8 rounding
    nw = torch.rand(k, generator=g) + 0.5
    want = ops.linear_q(F.rms_norm(x, (k,), nw, 1e-5), *packed, n, bits)
    torch.testing.assert_close(ops.linear_q(x, *packed, n, bits, None, None, nw, 1e-5), want, rtol=1e-3,
                               atol=1e-3 * float(want.abs().max()))
    gu = torch.randn(m, 2 * k, generator=g)
    want = ops.linear_q(F.silu(gu[:, :k]) * gu[:, k:], *packed, n, bits)
    torch.testing.assert_close(ops.linear_q(gu, *packed, n, bits, None, None, None, 0.0, True), want, rtol=1e-3,
                               atol=1e-3 * float(want.abs().max()))


@needs_kernels
@pytest.mark.parametrize("bits", [4, 8])
def test_rows_independent_of_batch_and_threads(bits):
    n, k = 1000, 576
    u, d, mn = _blocks(n, k, bits, seed=2)
    packed = pack_q(u, d, mn, bits)
    g = torch.Generator().manual_seed(3)
    x, r = torch.randn(13, k, generator=g), torch.randn(13, n, generator=g)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            whole = ops.linear_q(x, *packed, n, bits, None, r)
            for i in range(13):   # bitwise: one row alone == the same row among 13
                assert torch.equal(ops.linear_q(x[i:i + 1], *packed, n, bits, None, r[i:i + 1]), whole[i:i + 1])
            outs.append(whole)
        assert torch.equal(outs[0], outs[1])
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bits", [4, 8])
def test_unpack_rows_is_the_dequantised_row(bits):
    u, d, mn = _blocks(70, 64, bits, seed=4)
    ids = torch.tensor([0, 69, 17, 17, 33])
    torch.testing.assert_close(unpack_rows(*pack_q(u, d, mn, bits), bits, ids), dequantise_q(u, d, mn)[ids],
                               rtol=0, atol=0)


@needs_kernels
def test_rejects_wrong_inputs():
    u, d, mn = _blocks(32, 64, 4)
    packed = pack_q(u, d, mn, 4)
    with pytest.raises(RuntimeError):
        ops.linear_q(torch.randn(1, 65), *packed, 32, 4)       # K mismatch
    with pytest.raises(RuntimeError):
        ops.linear_q(torch.randn(1, 64), *packed, 64, 4)       # N beyond the packed rows
    with pytest.raises(RuntimeError):
        ops.linear_q(torch.randn(1, 64), *packed, 32, 8)       # the wrong width for this layout


def test_gguf_blocks_equal_the_gguf_package_dequantisation():
    """The (u, d, m) read from raw blocks dequantise to what the gguf package makes of the same bytes."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    g = np.random.default_rng(0)
    w = g.standard_normal((24, 96)).astype(np.float32)
    for kind in GGUF_BLOCKS:
        t = GGMLQuantizationType[kind]
        raw = quantize(w, t)
        u, d, mn, bits = gguf_blocks(raw, kind, 24, 96)
        torch.testing.assert_close(dequantise_q(u, d, mn), torch.from_numpy(dequantize(raw, t).reshape(24, 96)),
                                   rtol=0, atol=1e-6)


@needs_kernels
def test_attend_with_a_16_bit_cache_is_attend_on_the_rounded_keys_and_values():
    """attend on a float16 cache writes the new keys/values rounded to float16 and gives what the float32 kernel
    gives on a cache holding those rounded values (to float32 summation order)."""
    g = torch.Generator().manual_seed(5)
    H, Hkv, D, start, T = 6, 2, 64, 150, 3
    qkv = torch.randn(T, (H + 2 * Hkv) * D, generator=g)
    cos, sin = torch.rand(T, D, generator=g), torch.rand(T, D, generator=g)
    k32, v32 = torch.randn(Hkv, 300, D, generator=g), torch.randn(Hkv, 300, D, generator=g)
    k16, v16 = k32.half(), v32.half()
    kr, vr = k16.float(), v16.float()
    got = ops.attend(qkv, cos, sin, k16, v16, start, H, Hkv)
    want = ops.attend(qkv, cos, sin, kr, vr, start, H, Hkv)
    torch.testing.assert_close(k16[:, start:start + T].float(), kr[:, start:start + T].half().float())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # one query at a time equals the three together (decode = verification)
    k16b, v16b = k32.half(), v32.half()
    rows = [ops.attend(qkv[t:t + 1], cos[t:t + 1], sin[t:t + 1], k16b, v16b, start + t, H, Hkv) for t in range(T)]
    assert torch.equal(torch.cat(rows), got)
