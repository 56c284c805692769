import random

from completer.training.fim import chunks, encode_samples, fim_pieces, pack, split_fim
from completer.models.tokenizer import EOS, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX
from completer.training.tokenizer import train_tokenizer

TEXT = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(200))


def test_split_reassembles():
    rng = random.Random(0)
    for _ in range(500):
        p, m, s = split_fim(TEXT[:700], rng)
        assert p + m + s == TEXT[:700]


def test_chunks_cover_text_at_line_boundaries():
    parts = list(chunks(TEXT, 500))
    assert "".join(parts) == TEXT and all(c.endswith("\n") for c in parts)


def test_mode_mix_and_formats():
    rng = random.Random(1)
    counts = {"psm": 0, "spm": 0, "plain": 0}
    for _ in range(2000):
        pieces = fim_pieces(TEXT[:400], rng)
        assert pieces[-1] == EOS
        if pieces[0] == FIM_PREFIX:
            counts["psm"] += 1
            assert pieces[2] == FIM_SUFFIX and pieces[4] == FIM_MIDDLE
            assert pieces[1] + pieces[5] + pieces[3] == TEXT[:400]
        elif pieces[0] == FIM_SUFFIX:
            counts["spm"] += 1
            assert pieces[2] == FIM_PREFIX and pieces[4] == FIM_MIDDLE
            assert pieces[3] + pieces[5] + pieces[1] == TEXT[:400]
        else:
            counts["plain"] += 1
            assert pieces == [TEXT[:400], EOS]
    assert 0.45 < counts["psm"] / 2000 < 0.55 and 0.35 < counts["spm"] / 2000 < 0.45
    assert 0.07 < counts["plain"] / 2000 < 0.13


def test_encode_samples_decodes_to_formats(tmp_path):
    tok = train_tokenizer([TEXT], vocab_size=400)
    stream = encode_samples([TEXT], tok, seed=3)
    eos = tok.token_to_id(EOS)
    assert stream[-1] == eos
    text = tok.decode(stream.tolist(), skip_special_tokens=False)
    samples = [s for s in text.split(EOS) if s]
    assert len(samples) == len(list(chunks(TEXT)))
    for s in samples:
        if s.startswith(FIM_PREFIX):
            p, rest = s[len(FIM_PREFIX):].split(FIM_SUFFIX)
            suf, mid = rest.split(FIM_MIDDLE)
            assert p + mid + suf in TEXT
    w = pack(stream, 16)
    assert w.shape[1] == 17 and (w.reshape(-1) == stream[: w.size]).all()


def test_pack_samples_keeps_each_sample_whole_in_one_window():
    import numpy as np
    import torch
    from completer.training.fim import PAD, inputs_targets, pack_samples
    ids = np.arange(1, 15, dtype=np.uint16)             # samples [1..4], [5..9], [10..11], [12..14]
    starts = np.array([0, 4, 9, 11])
    w = pack_samples(ids, starts, seq_len=6)  # windows of 7
    assert w.tolist() == [[1, 2, 3, 4, PAD, PAD, PAD], [5, 6, 7, 8, 9, 10, 11], [12, 13, 14, PAD, PAD, PAD, PAD]]
    long = pack_samples(np.arange(1, 11, dtype=np.uint16), np.array([0]), seq_len=4)
    assert long.tolist() == [[6, 7, 8, 9, 10]]          # too long: its last tokens (the target and the end)
    x, y = inputs_targets(torch.from_numpy(w), pad_id=99)
    assert x[0].tolist() == [1, 2, 3, 4, 99, 99] and y[0].tolist() == [2, 3, 4, PAD, PAD, PAD]
