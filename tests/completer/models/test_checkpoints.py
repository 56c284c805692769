import pytest
import torch

from completer.models.llama import LlamaForCausalLM
from completer.models.tokenizer import load_tokenizer

SRC = "import os\n\ndef main():\n    print(os.getcwd())\n"


@pytest.mark.parametrize("name", ["target", "draft"])
def test_shipped_checkpoint_matches_transformers(house, name):
    transformers = pytest.importorskip("transformers")
    folder = house / name
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    tok = load_tokenizer(folder)
    ids = [tok.token_to_id("<|fim_suffix|>")] + tok.encode("\n").ids + [tok.token_to_id("<|fim_prefix|>")] \
        + tok.encode(SRC).ids + [tok.token_to_id("<|fim_middle|>")]
    assert hf_tok.encode("<|fim_suffix|>\n<|fim_prefix|>" + SRC + "<|fim_middle|>") == ids
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    ours = LlamaForCausalLM.from_pretrained(folder)
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.allclose(hf(x).logits, ours(x), atol=1e-4, rtol=1e-4)
    assert ours.config.max_position_embeddings == 2048
    assert ours.config.vocab_size == tok.get_vocab_size()


def test_pair_shares_vocab(house):
    t = LlamaForCausalLM.from_pretrained(house / "target")
    d = LlamaForCausalLM.from_pretrained(house / "draft")
    assert t.config.vocab_size == d.config.vocab_size
    assert sum(p.numel() for p in d.parameters()) < sum(p.numel() for p in t.parameters())
