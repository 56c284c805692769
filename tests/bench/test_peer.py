"""bench/peer.py and completer/training/gguf_write.py: the GGUF written for llama.cpp holds the model's own weights and
config (read back with the project's GGUF loader), and the side-by-side benchmark runs end to end (tiny pair,
torch rows only: llama.cpp is an optional extra that CI does not build)."""

from __future__ import annotations

import json

import pytest
import torch

from bench import peer
from completer.training.gguf_write import write_gguf
from completer.models.llama import LlamaForCausalLM


@pytest.mark.parametrize("qtype,tol", [("f32", 0.0), ("q8_0", 0.02)])
def test_gguf_written_for_llama_cpp_reads_back_as_the_same_model(tiny_pair, tmp_path, qtype, tol):
    pytest.importorskip("gguf")
    from completer.models.gguf import _reader, config_from_gguf, read_state_dict

    target = tiny_pair[0]
    path = write_gguf(target, tmp_path / f"t-{qtype}.gguf", qtype)
    model = LlamaForCausalLM.from_pretrained(target)
    cfg = config_from_gguf(_reader(path))
    for f in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "rope_theta", "tie_word_embeddings"):
        assert getattr(cfg, f) == getattr(model.config, f), f
    state = read_state_dict(path, cfg)                       # un-permutes q/k: the writer's permutation inverted
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and model.config.tie_word_embeddings:
            continue
        torch.testing.assert_close(state[name], p.float(), atol=tol * float(p.abs().max()), rtol=0)


def test_peer_bench_torch_only_small_run(tiny_pair, tmp_path):
    out = tmp_path / "peer"
    assert peer.main(["--model", str(tiny_pair[0]), "--draft", str(tiny_pair[1]), "--prompts", "1", "--repeats",
                      "1", "--threads", "1", "--max-new", "6", "--budget", "300", "--torch-configs", "none,ngram",
                      "--llama-configs", "", "--out", str(out)]) == 0
    res = json.loads((out / "peer.json").read_text())
    cells = {(r["mode"], r["config"]) for r in res["summary"]}
    assert cells == {(m, c) for m in ("cold", "warm") for c in ("none", "ngram")}
    for r in res["summary"]:
        assert r["identical_to_torch_none"] == "1/1"         # speculation is lossless
        assert r["latency_ms_p50"] > r["prefill_ms_p50"] > 0
    assert all(len(q["tokens"]) == 6 for q in res["requests"])  # end-of-text ignored: every request yields 6
    assert res["rss"][0]["after_load_mb"] > 0
    assert "| 1 | torch | ngram |" in (out / "peer.md").read_text()
    assert (out / "peer.png").stat().st_size > 1000
