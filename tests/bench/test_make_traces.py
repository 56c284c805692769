"""bench.make_traces, run as a program (``python -m bench.make_traces --file PATH``) on a file of the standard
library: the traces it writes, and the checked-in traces it made."""

import sysconfig
from pathlib import Path

import pytest

from lsp import trace as tr
from tests.helpers.programs import run_program

TRACES = Path(__file__).resolve().parents[2] / "bench" / "traces"
FILE = Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py"
SOURCE = FILE.read_text()


def _make(tmp_path, seed: int, chars: int = 120, *args: str) -> tr.Trace:
    """The one trace the program writes typing about ``chars`` characters of textwrap.py back in."""
    out = tmp_path / f"s{seed}-c{chars}-{'-'.join(args)}"
    run_program("bench.make_traces", "--file", FILE, "--out", out, "--seed", seed, "--chars", chars, *args)
    [path] = sorted(out.glob("*.jsonl"))
    return tr.load(path)


def test_seeded_determinism(tmp_path):
    assert tr.dumps(_make(tmp_path / "a", 5)) == tr.dumps(_make(tmp_path / "b", 5))
    assert tr.dumps(_make(tmp_path / "a", 5)) != tr.dumps(_make(tmp_path / "a", 6))


@pytest.mark.parametrize("seed", range(6))
def test_final_text_equals_the_file(tmp_path, seed):
    t = _make(tmp_path, seed)
    assert tr.final_text(t) == SOURCE
    assert len(t.header.text) == len(SOURCE) - t.header.meta["typed_chars"]
    times = [e.t_ms for e in t.events]
    assert times == sorted(times)


def test_typos_are_corrected_with_backspace(tmp_path):
    t = _make(tmp_path, 1, 200, "--typo-p", "0.5")
    backspaces = [e for e in t.events if e.edit is not None and e.edit["text"] == "" and "range" in e.edit]
    assert len(backspaces) >= 5
    assert tr.final_text(t) == SOURCE        # every typo was corrected
    plain = _make(tmp_path, 1, 200, "--typo-p", "0")
    assert not [e for e in plain.events if e.edit is not None and e.edit["text"] == "" and "range" in e.edit]


def test_human_pace_and_pauses(tmp_path):
    t = _make(tmp_path, 2, chars=300)
    keys = [e for e in t.events if e.edit is not None]
    gaps = [b.t_ms - a.t_ms for a, b in zip(keys, keys[1:])]
    median = sorted(gaps)[len(gaps) // 2]
    assert 60 < median < 800                        # a human, not a machine gun
    after_newline = [b.t_ms - a.t_ms for a, b in zip(keys, keys[1:]) if a.edit["text"].startswith("\n")]
    assert after_newline and min(after_newline) > median   # a longer pause at each line end
    accepts = [e for e in t.events if e.accept is not None]
    assert accepts and all(e.accept["intended"] for e in accepts)


def test_checked_in_traces_load_and_restore_their_span():
    files = sorted(TRACES.glob("*.jsonl"))
    assert len(files) >= 3 and {tr.load(f).header.language_id for f in files} >= {"python", "javascript"}
    for f in files:
        t = tr.load(f)
        start, end = t.header.meta["span"]
        final = tr.final_text(t)
        assert final[:start] == t.header.text[:start] and final[end:] == t.header.text[start:]
        src = Path(t.header.meta["source"].removeprefix("held-out split: "))
        if src.is_file():                           # the JS/C sources exist on this machine
            assert final == src.read_text()


def _keys_gaps(t: tr.Trace) -> list[float]:
    keys = [e for e in t.events if e.edit is not None]
    return [b.t_ms - a.t_ms for a, b in zip(keys, keys[1:]) if not a.edit["text"].startswith("\n")]


def test_rhythm_sets_the_typists_pace_and_is_recorded(tmp_path):
    def trace(rhythm, seed=3):
        return _make(tmp_path, seed, 300, "--rhythm", rhythm)

    med = {r: sorted(_keys_gaps(trace(r)))[len(_keys_gaps(trace(r))) // 2] for r in ("fast", "medium", "slow")}
    assert 50 < med["fast"] < 110                     # ~80 ms between keys (punctuation x1.8 aside)
    assert med["fast"] < med["medium"] < med["slow"]
    assert 300 < med["slow"] < 800
    for seed in range(4):                             # every fast typist is fast, every slow one slow
        assert trace("fast", seed).header.meta["typist_mean_iki_ms"] <= 100 <= 350 <= trace(
            "slow", seed).header.meta["typist_mean_iki_ms"]
    assert trace("fast").header.meta["rhythm"] == "fast" and "rhythm" not in trace("medium").header.meta
    assert "typist_mean_iki_ms" not in trace("medium").header.meta
    assert tr.dumps(trace("medium")) == tr.dumps(_make(tmp_path / "plain", 3, chars=300))   # medium: as before
    assert tr.final_text(trace("slow")) == SOURCE
    bad = run_program("bench.make_traces", "--file", FILE, "--out", tmp_path / "bad", "--rhythm", "sprint",
                      check=False)
    assert bad.returncode != 0 and "rhythm" in bad.stderr and not (tmp_path / "bad").exists()


def test_checked_in_rhythm_traces_are_held_out_and_at_their_pace():
    from completer.training.corpus import is_heldout

    files = sorted((TRACES / "rhythm").glob("*.jsonl"))
    by = {}
    for f in files:
        t = tr.load(f)
        by.setdefault(t.header.meta["rhythm"], []).append(t)
        assert f.name.startswith(t.header.meta["rhythm"] + "-")
        rel = t.header.meta["source"].removeprefix("held-out split: ")
        assert is_heldout(rel), rel                   # code the models never trained on
    assert set(by) == {"fast", "slow"}
    for rhythm, lo, hi in (("fast", 50, 110), ("slow", 300, 800)):
        gaps = sorted(g for t in by[rhythm] for g in _keys_gaps(t))
        assert lo < gaps[len(gaps) // 2] < hi
