"""completer tune: the candidates each backend offers, and the choice rule (identical greedy output, a real gain)."""

import re

from completer.tune import candidates, choose


def test_candidates_per_backend():
    torch_c = candidates("torch", [2, 4], "house:draft", "house:eagle3")
    assert {"none", "draft k=2", "ngram k=4", "draft+ngram k=2", "draft adaptive"} <= set(torch_c)
    assert not any(n.startswith(("eagle3", "ngram_gpu", "suffix")) for n in torch_c)       # vLLM-only methods
    vllm_c = candidates("vllm", [3], None, "house:eagle3")
    assert set(vllm_c) == {"none", "eagle3 k=3", "ngram k=3", "ngram_gpu k=3", "suffix k=3"}
    assert vllm_c["eagle3 k=3"] == {"speculation": "eagle3", "num_speculative_tokens": 3}


def row(tps, same=True, p50=100.0, p95=150.0):
    return {"tokens_per_s_p50": tps, "greedy_identical_to_none": same, "latency_p50_ms": p50, "latency_p95_ms": p95}


def test_choice_needs_identical_output_and_the_minimum_gain():
    table = {"none": row(100), "a": row(104), "b": row(130, same=False), "c": row(120), "d": {"error": "x"}}
    assert choose(table, 1.05) == "c"
    assert choose({"none": row(100), "a": row(104)}, 1.05) == "none"       # 4% is within noise: keep none
    assert choose({"none": row(100), "b": row(200, same=False)}, 1.05) == "none"


def test_choice_is_never_slower_than_none_in_request_latency():
    # bench/results/tune/run-491f8a0: draft k=2 at 1.13x median tok/s, but its median request took 172 ms vs 160
    table = {"none": row(223, p50=160, p95=240), "draft k=2": row(252, p50=172, p95=215)}
    assert choose(table, 1.05) == "none"
    table["ngram k=4"] = row(250, p50=150, p95=240)
    assert choose(table, 1.05) == "ngram k=4"
    table["ngram k=4"] = row(250, p50=150, p95=241)
    assert choose(table, 1.05) == "none"


def test_summary_takes_each_prompts_median_time_over_the_rounds():
    from completer.tune import Run, summarise

    ids, text = [[1, 2, 3, 4], [5, 6]], ["abcd", "ef"]
    rounds = [[Run(0.4, ids[0], text[0]), Run(0.1, ids[1], text[1])],
              [Run(0.2, ids[0], text[0]), Run(0.3, ids[1], text[1])],
              [Run(0.2, ids[0], text[0]), Run(0.2, ids[1], text[1])]]
    s = summarise(rounds, {"accepted_tokens": 0, "draft_per_position": [0]},
                  {"accepted_tokens": 3, "draft_per_position": [4]})
    assert s["latency_p50_ms"] == 200.0 and s["rounds"] == 3       # per prompt 0.2 s and 0.2 s
    assert s["tokens_per_s_p50"] == 15.0                            # 4 / 0.2 and 2 / 0.2 tokens/s
    assert s["aggregate_tokens_per_s"] == 15.0 and s["tokens_per_step"] == 1.75
    assert s["same_output_every_round"] and s["output"] == text
    # a token past a stop string (never shown) is not other output; other text is
    rounds[2][1] = Run(0.2, [5, 6, 9], "ef")
    assert summarise(rounds, {}, {})["same_output_every_round"]
    rounds[2][1] = Run(0.2, [5, 7], "eg")
    assert not summarise(rounds, {}, {})["same_output_every_round"]


def test_summary_splits_each_request_into_its_first_token_and_the_decode_after_it():
    """Where a configuration's time goes: speculation may buy faster decode with a slower first token (on the H200
    at house scale eagle3's first token came 8.7 ms later than none's)."""
    from completer.tune import Run, summarise

    # 20 ms to a first chunk of 1 token, then 4 tokens in 8 ms: 2 ms per token; a one-token request has no decode
    rounds = [[Run(0.028, [1, 2, 3, 4, 5], "x", first_s=0.020, first_tokens=1), Run(0.010, [7], "y", 0.010, 1)],
              [Run(0.036, [1, 2, 3, 4, 5], "x", first_s=0.030, first_tokens=3), Run(0.012, [7], "y", 0.012, 1)]]
    s = summarise(rounds, {}, {})
    assert s["first_token_p50_ms"] == 16.0                          # median of 20, 10, 30, 12 ms
    assert abs(s["decode_ms_per_token_p50"] - 2.5) < 1e-9           # 8 ms / 4 and 6 ms / 2 tokens
    assert summarise([[Run(0.01, [7], "y", 0.01, 1)]], {}, {})["decode_ms_per_token_p50"] is None


def test_greedy_output_is_judged_on_the_first_round_and_reported_per_round():
    from completer.tune import greedy_identical, identical_per_round

    none = {"outputs": [["a(x)", "b"], ["a(y)", "b"]]}     # none's own rounds differ (vLLM: a cached prefill in bf16)
    assert greedy_identical({"outputs": [["a(x)", "b"], ["a(z)", "b"]]}, none)
    assert identical_per_round({"outputs": [["a(x)", "b"], ["a(z)", "b"]]}, none) == [2, 1]
    assert not greedy_identical({"outputs": [["a(y)", "b"], ["a(x)", "b"]]}, none)
    assert not greedy_identical({"outputs": [["a(x)", "c"]]}, none)


def test_the_warm_up_request_shares_no_prefix_with_the_first_request():
    from completer.tune import Request, warm_up_request

    first = Request("p", "<fim_prefix>x = ", max_new_tokens=9, stop=("\n",), heal="= ")
    w = warm_up_request(first)
    assert w.prompt[0] != first.prompt[0] and w.prompt.endswith(first.prompt)
    assert (w.max_new_tokens, w.stop, w.heal) == (9, ("\n",), "= ")
    ids = warm_up_request(Request("p", [5, 6, 7])).prompt
    assert list(ids) == [7, 5, 6, 7]


def test_summary_counts_healing_steps_served_unconstrained():
    from completer.tune import Run, summarise

    rounds = [[Run(0.1, [1], "a")]]
    assert summarise(rounds, {"heal_unconstrained": 2}, {"heal_unconstrained": 5})["heal_unconstrained"] == 3
    assert "heal_unconstrained" not in summarise(rounds, {}, {})   # the embedded engine has no such limit


def test_tune_defaults_follow_the_target():
    from completer.tune import default_models

    assert default_models("house:v2/target", None, None) == ("house:v2/draft", "house:v2/eagle3")   # the default
    assert default_models("house:target", None, None) == ("house:draft", "house:eagle3")
    assert default_models("/m/7b", None, None) == (None, None)
    assert default_models("house:target", "", "") == (None, None)
    assert default_models("/m/7b", "/m/0.5b", "/m/e3") == ("/m/0.5b", "/m/e3")


def test_a_choice_saved_for_house_v1_is_not_used_for_house_v2(tmp_path, monkeypatch):
    """The saved choice is keyed by the models: one measured for v1 (before the default became v2) is not applied
    to the v2 default, which runs without speculation until tune has measured it."""
    import json

    from completer.engine import EngineConfig
    from completer.engine.choice import choice_path, measured_for, resolve

    monkeypatch.setenv("COMPLETER_TUNE_DIR", str(tmp_path))
    v1 = EngineConfig(model="house:target", draft="house:draft")
    v2 = EngineConfig(model="house:v2/target")
    assert choice_path(v1) != choice_path(v2)
    settings = {"speculation": "ngram", "num_speculative_tokens": 4}
    choice_path(v1).write_text(json.dumps({"measured_for": measured_for(v1), "settings": settings,
                                           "winner": "ngram k=4"}))
    assert resolve(v1)[0].speculation == "ngram"
    config, why = resolve(v2)
    assert config.speculation == "none" and "nothing measured" in why
    for backend in ("torch", "vllm"):          # the key names each model of the pair (and the drafter on vLLM)
        a = measured_for(EngineConfig(backend=backend, model="house:target", draft="house:draft"))
        b = measured_for(EngineConfig(backend=backend))
        assert a["model"] != b["model"] and a["draft"] != b["draft"]
    v1_vllm = EngineConfig(backend="vllm", model="house:target", draft="house:draft")
    assert measured_for(v1_vllm)["drafter"] == "house:eagle3"
    assert measured_for(EngineConfig(backend="vllm"))["drafter"] == "house:v2/eagle3"


SRC = '''import os


def read_config(path):
    with open(path) as handle:
        return handle.read()


def main():
    config = read_config(os.environ["CONFIG"])
    print(config)
'''


def test_editor_shaped_requests_are_what_the_server_sends_while_a_line_is_typed():
    """tune measures requests as the language server makes them (line mode's stop at the newline, token healing of a
    partial word, the server's token limit), not 48-token completions that ghost text never asks for."""
    from completer.engine.base import open_model
    from completer.tune import editor_requests

    folder, tok = open_model("house:v2/target")
    reqs = editor_requests([SRC] * 6, folder, tok, 5, seed=3, max_tokens=40)
    assert len(reqs) == 5
    for r in reqs:
        assert "\n" in r.stop and 1 <= r.max_new_tokens <= 40
        m = re.fullmatch(r"<\|fim_suffix\|>(.*)<\|fim_prefix\|>(.*)<\|fim_middle\|>", r.prompt, re.S)  # house: SPM
        assert m, r.prompt
        suffix, prefix = m.groups()
        # the cursor is inside one of the code lines, typed after its first two characters; the rest of that line
        # is not there yet, the lines after it are (the suffix)
        typed = (prefix + r.heal).rsplit("\n", 1)[-1]
        line = next(x for x in SRC.splitlines() if x.startswith(typed) and len(x.strip()) >= 8)
        assert len(typed) >= len(line) - len(line.lstrip()) + 2
        assert suffix.startswith("\n") and SRC.split(line + "\n", 1)[1].startswith(suffix[1:21])
    assert any(r.heal for r in reqs)           # a partial word at the cursor is re-typed by the model
    assert len({r.prompt for r in reqs}) > 1   # seeded, different cursors
    assert editor_requests([SRC] * 6, folder, tok, 5, seed=3, max_tokens=40) == reqs


def test_vllm_engines_side_by_side_split_the_gpu():
    """tune starts every vLLM engine first and interleaves the rounds (run-to-run drift of the H200 was larger than
    the effect measured one engine at a time), each with a part of GPU memory that fits beside the others."""
    import pytest

    from completer.tune import gpu_share

    assert gpu_share(None, 1) == 0.35 and gpu_share(None, 2) == 0.35
    assert gpu_share(None, 4) == 0.225 and gpu_share(None, 6) == 0.15
    assert gpu_share(0.2, 4) == 0.2
    with pytest.raises(SystemExit, match="one-at-a-time"):
        gpu_share(0.35, 4)


def test_only_names_configurations_that_exist(tmp_path):
    import pytest

    from completer.tune import main

    with pytest.raises(SystemExit, match="eagle3 k=9"):
        main(["--only", "eagle3 k=9", "--out", str(tmp_path / "t.json")])


def test_a_dflash_drafter_is_measured_at_the_k_its_blocks_were_trained_for(tmp_path):
    import json

    from completer.tune import candidates

    d = tmp_path / "df"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": 5,
                                               "dflash_config": {"mask_token_id": 4, "target_layer_ids": [1]}}))
    c = candidates("vllm", [2, 3], None, None, str(d))
    assert c["dflash k=4"] == {"speculation": "dflash", "num_speculative_tokens": 4, "drafter": str(d)}
    assert "dflash k=2" not in c                                  # a bidirectional block of 5 is not one of 3
    assert "dflash k=4" not in candidates("torch", [2], None, None, str(d))
    (d / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"], "block_size": 5,
                                               "dflash_config": {"mask_token_id": 4, "target_layer_ids": [1],
                                                                 "causal": True}}))
    assert sorted(k for k in candidates("vllm", [2, 3, 6], None, None, str(d)) if k.startswith("dflash")) == \
        ["dflash k=2", "dflash k=3", "dflash k=4"]


def test_summary_of_fresh_rounds_takes_every_request_once():
    """With new prompts in every round there is no per-prompt median: medians / p95 over every request."""
    from completer.tune import Run, summarise

    rounds = [[Run(0.1, [1, 2], "ab"), Run(0.4, [3], "c")], [Run(0.2, [4, 5, 6, 7], "defg"), Run(0.3, [8], "h")]]
    s = summarise(rounds, {}, {}, fresh=True)
    assert s["latency_p50_ms"] == 250.0                             # median of 100, 400, 200, 300 ms
    assert abs(s["tokens_per_s_p50"] - (10 / 3 + 20) / 2) < 1e-9      # median of 20, 2.5, 20, 3.33 tokens/s
    assert s["aggregate_tokens_per_s"] == 8 / 1.0
    assert s["outputs"] == [["ab", "c"], ["defg", "h"]] and s["same_output_every_round"] is None
