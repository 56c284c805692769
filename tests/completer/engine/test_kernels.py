"""The engine's own fp16-weight matmul kernel (completer/engine/kernels.py, matvec.cpp): same numbers as torch,
the same row whatever the number of rows or threads (lossless speculation compares a decode step with a
verification step), and the model's packed step with it against the float model."""
import pytest
import torch
import torch.nn.functional as F

from completer.engine import kernels

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
def test_rows_independent_of_batch_and_threads():
    x, w, b, r, nw = _case(13, 320, 1536, seed=1)
    p = ops.pack_f16(w)
    before = torch.get_num_threads()
    try:
        outs = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            whole = ops.linear_f16(x, p, 1536, b, r, nw, 1e-5)
            for i in range(13):   # bitwise: one row alone == the same row among 13
                assert torch.equal(ops.linear_f16(x[i:i + 1], p, 1536, b, r[i:i + 1], nw, 1e-5), whole[i:i + 1])
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
