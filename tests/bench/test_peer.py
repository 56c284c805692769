"""bench/peer.py (run as a program): the side-by-side benchmark runs end to end (tiny pair, torch rows only:
llama.cpp is an optional extra that CI does not build)."""

import json

from tests.helpers.programs import run_program


def test_peer_bench_torch_only_small_run(tiny_pair, tmp_path):
    out = tmp_path / "peer"
    run_program("bench.peer", "--model", tiny_pair[0], "--draft", tiny_pair[1], "--prompts", "1", "--repeats", "1",
                "--threads", "1", "--max-new", "6", "--budget", "300", "--torch-configs", "none,ngram",
                "--llama-configs", "", "--out", out)
    res = json.loads((out / "peer.json").read_text())
    cells = {(r["mode"], r["config"]) for r in res["summary"]}
    assert cells == {(m, c) for m in ("cold", "warm") for c in ("none", "ngram")}
    for r in res["summary"]:
        assert r["identical_to_torch_none"] == "1/1"         # speculation is lossless
        assert r["latency_ms_p50"] > r["prefill_ms_p50"] > 0
    assert all(len(q["tokens"]) == 6 for q in res["requests"])  # end-of-text ignored: every request yields 6
    assert res["rss"][0]["after_load_mb"] > res["rss"][0]["runtime_mb"] > 0     # the model adds to the imports
    assert "| 1 | torch | ngram |" in (out / "peer.md").read_text()
    assert (out / "peer.png").stat().st_size > 1000
