"""Packed (int4/int8) model folders: smaller on disk, resolved to an ordinary folder whose model computes what the
unpacked one does, up to the quantisation error."""

import json
import shutil

import pytest
import torch

from completer.models import quant, resolve_model
from completer.models.llama import LlamaForCausalLM
from completer.prompt import template_for_model


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("bits,embed_bits,tol", [(8, 8, 0.02), (4, 8, 0.25), (4, 4, 0.35)])
def test_packed_folder_resolves_to_a_model_close_to_the_original(tmp_path, cache, tiny_pair, bits, embed_bits, tol):
    src = tiny_pair[0]
    dst = tmp_path / "packed" / "target"
    entry = quant.pack(src, dst, bits=bits, embed_bits=embed_bits, group=32)
    assert entry["bits"] == bits and not list(dst.glob("*.safetensors"))     # no loader mistakes it for weights
    assert (dst / "model.quant").stat().st_size < 0.6 * (src / "model.safetensors").stat().st_size
    assert quant.is_packed(dst) and not quant.is_packed(src)
    folder = resolve_model(str(dst))
    assert folder != dst and folder.is_relative_to(cache)
    assert resolve_model(str(dst)) == folder                                  # made once
    cfg = json.loads((folder / "config.json").read_text())
    assert "completer_quant" not in cfg and cfg["completer_dequantised_from"]["bits"] == bits
    assert template_for_model(folder) == "house"
    ids = torch.tensor([[1, 40, 41, 42, 43, 44, 45, 3, 50, 51, 2]])
    a = LlamaForCausalLM.from_pretrained(src)(ids)
    b = LlamaForCausalLM.from_pretrained(folder)(ids)
    err = ((a - b).norm() / a.norm()).item()
    assert err < tol, err
    assert err > 0                                                            # it really was quantised


def test_int4_nibbles_round_trip_exactly():
    w = torch.randn(6, 64)
    q, s = quant._quantise(w, 4, 32)
    assert q.dtype == torch.uint8 and q.shape == (6, 32) and s.shape == (6, 2)
    back = quant._dequantise(q, s, 4, 64)
    levels = back.reshape(6, 2, 32) / s.float().unsqueeze(-1)
    assert torch.allclose(levels, levels.round(), atol=1e-3) and levels.abs().max() <= 7.001
    assert ((back - w).abs() <= s.float().repeat_interleave(32, 1) / 2 + 1e-3).all()


def test_a_folder_without_packed_weights_is_left_as_it_is(tmp_path, tiny_pair, cache):
    plain = tmp_path / "plain"
    shutil.copytree(tiny_pair[0], plain)
    assert resolve_model(str(plain)) == plain
    assert not cache.exists()


def test_a_pair_can_share_one_tokenizer(tmp_path, tiny_pair, cache):
    """house:v2's draft ships without tokenizer files; its dequantised folder gets the target's."""
    from completer.models.tokenizer import load_tokenizer

    quant.pack(tiny_pair[0], tmp_path / "pair" / "target")
    quant.pack(tiny_pair[1], tmp_path / "pair" / "draft", tokenizer_from="../target")
    assert not (tmp_path / "pair" / "draft" / "tokenizer.json").exists()
    folder = resolve_model(str(tmp_path / "pair" / "draft"))
    assert (folder / "tokenizer.json").read_bytes() == (tiny_pair[0] / "tokenizer.json").read_bytes()
    assert load_tokenizer(folder).get_vocab_size() == load_tokenizer(tiny_pair[0]).get_vocab_size()
