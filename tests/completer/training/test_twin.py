"""Cost twins (completer.training.twin): a house model padded to a larger shape computes the same function.

A small twin of the shipped house v2 target (2x width, 2x layers, head dim 64 -> 128 so the rope and attention-scale
corrections are exercised, 5 -> 10 query heads in 2 KV groups), of its EAGLE-3 drafter and of its draft model is
built through the CLI in fp32 and compared with the originals: logits to rounding, greedy output over the test
prompts, the drafter's draft tokens. Transformers loads it too (the config is read as Hugging Face and vLLM read it:
rope theta, head dim, eps)."""

from __future__ import annotations

import json

import pytest
import torch

from completer.cli import main as cli_main
from completer.models import HOUSE_DIR, resolve_model
from completer.models.llama import LlamaForCausalLM
from completer.training.drafter import Eagle3Drafter, greedy_continuation, target_features
from completer.training.twin import PRESETS, Padder, Shape, parse_shape, source_shape

TARGET_SHAPE = "hidden=640,layers=16,heads=10,kv_heads=2,head_dim=128,mlp=1536"
DRAFT_SHAPE = "hidden=256,layers=8,heads=6,kv_heads=2,mlp=768"        # head dim stays 64: no rope change
PROMPTS = ["def fibonacci(n):\n    if n < 2:\n        return n\n    return ",
           "import os\n\n\ndef read_lines(path):\n    with open(path) as f:\n",
           "fn main() {\n    let xs: Vec<i32> = (0..10).collect();\n    for x in ",
           "function add(a, b) {\n  return a + b;\n}\n\nfunction mul(a, b) {\n"]


@pytest.fixture(scope="module")
def twin(tmp_path_factory, house_options):
    out = tmp_path_factory.mktemp("twin")
    assert cli_main(["twin", "--target", "house:v2/target", "--drafter", "house:v2/eagle3", "--draft", "house:v2/draft",
                     "--shape", TARGET_SHAPE, "--draft-shape", DRAFT_SHAPE, "--dtype", "fp32", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def prompts(house_tokenizer):
    return [house_tokenizer.encode(p, add_special_tokens=False).ids for p in PROMPTS]


def load(folder):
    return LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32)


@pytest.fixture(scope="module")
def pairs(twin):
    """(house model, its twin) for the target and the draft, loaded once."""
    return {w: (load(resolve_model(f"house:v2/{w}")), load(twin / w)) for w in ("target", "draft")}


def test_twin_folders_have_the_asked_shape(twin):
    cfg = json.loads((twin / "target" / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["head_dim"], cfg["intermediate_size"]) == (640, 16, 10, 2, 128, 1536)
    assert cfg["rope_theta"] == pytest.approx(1e8) and cfg["rope_parameters"]["rope_theta"] == pytest.approx(1e8)
    assert cfg["rms_norm_eps"] == pytest.approx(1e-5 * 320 / 640)
    assert "completer_quant" not in cfg and cfg["completer_twin"]["source"] == "house:v2/target"
    assert (twin / "target" / "tokenizer.json").is_file() and (twin / "draft" / "tokenizer.json").is_file()
    d = json.loads((twin / "eagle3" / "config.json").read_text())
    assert (d["hidden_size"], d["target_hidden_size"], d["num_attention_heads"], d["head_dim"]) == (640, 640, 10, 128)
    assert d["eagle_aux_hidden_state_layer_ids"] == [2, 4, 8] and d["architectures"] == ["LlamaForCausalLMEagle3"]
    drafter = Eagle3Drafter.load(twin / "eagle3")
    assert drafter.fc.weight.shape == (640, 3 * 640)
    assert json.loads((twin / "twin.json").read_text())["draft"]["shape"]["layers"] == 8


@pytest.mark.parametrize("which", ["target", "draft"])
def test_twin_logits_equal_the_originals_in_fp32(pairs, prompts, which):
    src, tw = pairs[which]
    for ids in prompts:
        x = torch.tensor([ids])
        with torch.no_grad():
            a, b = src(x), tw(x)
        assert a.shape == b.shape
        assert (a - b).abs().max().item() <= 1e-4 * a.abs().max().item(), which


@pytest.mark.parametrize("which", ["target", "draft"])
def test_twin_greedy_output_is_the_originals(pairs, prompts, which):
    src, tw = pairs[which]
    for ids in prompts:
        assert greedy_continuation(tw, ids, 16, 0, "cpu") == greedy_continuation(src, ids, 16, 0, "cpu")


def test_transformers_reads_the_twin_as_the_house_model(twin, pairs, prompts):
    """vLLM follows Hugging Face's reading of config.json (rope theta, head dim, eps): transformers' Llama on the
    twin gives the house model's logits."""
    transformers = pytest.importorskip("transformers")
    src = pairs["target"][0]
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(twin / "target"), dtype=torch.float32).eval()
    x = torch.tensor([prompts[0]])
    with torch.no_grad():
        a, b = src(x), hf(x).logits
    assert (a - b).abs().max().item() <= 1e-4 * a.abs().max().item()


def test_twin_drafter_drafts_the_same_tokens(twin, pairs, prompts):
    """Along the target's greedy continuations, the twin drafter on the twin target drafts (k = 4, every position)
    the tokens the house drafter drafts on the house target."""
    src, tw = pairs["target"]
    d0, d1 = Eagle3Drafter.load(HOUSE_DIR / "v2" / "eagle3"), Eagle3Drafter.load(twin / "eagle3")
    compared = 0
    for ids in prompts:
        seq = torch.tensor([ids + greedy_continuation(src, ids, 24, None, "cpu")])
        with torch.no_grad():
            outs = []
            for target, drafter in ((src, d0), (tw, d1)):
                feats, _ = target_features(target, seq, drafter.config.aux_layer_ids)
                outs.append(drafter.unrolled(target.model.embed_tokens, seq, feats, 4))
        for a, b in zip(*outs):
            assert (a - b).abs().max().item() <= 1e-4 * a.abs().max().item()
            assert torch.equal(a.argmax(-1), b.argmax(-1))
            compared += a.shape[1]
    assert compared > 4 * 80


def test_shapes_and_refusals():
    src = Shape(hidden=320, layers=8, heads=5, kv_heads=1, head_dim=64, mlp=768)
    seven = parse_shape("7b", src)
    assert seven == PRESETS["7b"] and 6.5e9 < seven.params(8192) < 6.7e9      # ~6.6B at an 8192 vocabulary
    assert parse_shape("640x16", src) == Shape(hidden=640, layers=16, heads=10, kv_heads=1, head_dim=64, mlp=1536)
    p = Padder(src, seven)
    # query heads of KV group 0 stay in the first group of 7; rotate-half pairs (i, i + 32) land on (i, i + 64)
    assert p.q_rows.view(5, 64)[:, 0].tolist() == [0, 128, 256, 384, 512]
    assert p.q_rows[32].item() == 64 and p.k_rows[32].item() == 64 and p.v_rows[32].item() == 32
    with pytest.raises(ValueError, match="hidden 256 < the source's 320"):
        Padder(src, parse_shape("256x8", src))
    with pytest.raises(ValueError, match="query heads per KV head"):
        Padder(src, parse_shape("hidden=640,heads=8,kv_heads=2", src))
    with pytest.raises(ValueError, match="expected 7b"):
        parse_shape("big", src)
    assert source_shape({"hidden_size": 896, "num_attention_heads": 14, "num_key_value_heads": 2,
                         "intermediate_size": 4864, "num_hidden_layers": 24}) == PRESETS["0.5b"]
