import pytest
from tokenizers import Tokenizer

from completer.models.tokenizer import EOS, SPECIAL_TOKENS, load_tokenizer
from completer.training.tokenizer import save_tokenizer, train_tokenizer

CODE = [
    "def f(x):\n\treturn x  +  1\r\n\n\n",
    "    # héllo wörld — 🎉 日本語\n",
    "class A:\n    pass\n\t \t\n",
    "s = '\\u00e9'  \x0b\x0c\n",
    "",
]


@pytest.fixture(scope="module")
def small_tok(tmp_path_factory):
    texts = ["def add(a, b):\n    return a + b\n" * 20, "import os\nprint(os.getcwd())\n" * 20]
    tok = train_tokenizer(texts, vocab_size=400)
    folder = tmp_path_factory.mktemp("tok")
    save_tokenizer(tok, folder)
    return folder


def test_special_tokens_have_fixed_ids(small_tok):
    tok = load_tokenizer(small_tok)
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    ids = tok.encode("<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>").ids
    assert ids[0] == tok.token_to_id("<|fim_prefix|>") and ids[-1] == tok.token_to_id("<|fim_middle|>")


@pytest.mark.parametrize("text", CODE)
def test_round_trip_tokenizers_and_transformers(small_tok, text):
    transformers = pytest.importorskip("transformers")
    tok = Tokenizer.from_file(str(small_tok / "tokenizer.json"))
    assert tok.decode(tok.encode(text).ids) == text
    hf = transformers.AutoTokenizer.from_pretrained(str(small_tok))
    assert hf.encode(text) == tok.encode(text).ids          # same ids, no BOS added
    assert hf.decode(hf.encode(text)) == text
    assert hf.eos_token == EOS and hf.pad_token == EOS


def test_shipped_tokenizer_round_trips(house):
    tok = load_tokenizer(house / "target")
    assert tok.get_vocab_size() <= 8192
    for text in CODE:
        assert tok.decode(tok.encode(text).ids) == text
    assert (house / "target" / "tokenizer.json").read_bytes() == (house / "draft" / "tokenizer.json").read_bytes()
