"""bench.vllm.profile_summary: a py-spy raw profile split per engine core, named from the run's log."""

import lzma

from bench.vllm.profile_summary import engine_names, main, read_stacks, summarise

RAW = """\
process 10:"python";main (t.py:1);run (t.py:2) 5
process 10:"python";process 11:"spawn";run_busy_loop (core.py:9);EngineCore.step_with_batch_queue (core.py:4);execute_model (ex.py:7);forward (m.py:3) 6
process 10:"python";process 11:"spawn";run_busy_loop (core.py:9);EngineCore.step_with_batch_queue (core.py:4);sample_tokens (ex.py:8);propose (s.py:1) 3
process 10:"python";process 11:"spawn";run_busy_loop (core.py:9);EngineCore.step_with_batch_queue (core.py:5);execute_model (ex.py:7);forward (m.py:4) 1
process 10:"python";process 11:"spawn";run_busy_loop (core.py:9);Queue.get (queue.py:1) 90
process 10:"python";process 12:"spawn";run_busy_loop (core.py:9);EngineCore.step_with_batch_queue (core.py:4);execute_model (ex.py:7) 4
"""
LOG = """\
(EngineCore pid=11) INFO [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: model='m', \
speculative_config=SpeculativeConfig(method='eagle3', model='d', num_spec_tokens=2), tokenizer='m'
(EngineCore pid=12) INFO [core.py:116] Initializing a V1 LLM engine (v0.26.0) with config: model='m', \
speculative_config=None, tokenizer='m'
"""


def test_stacks_are_split_per_engine_core_and_named_by_configuration(tmp_path):
    raw = tmp_path / "p.txt.xz"
    raw.write_bytes(lzma.compress(RAW.encode()))
    stacks = read_stacks(raw)
    assert engine_names(LOG) == {"11": "eagle3 k=2", "12": "none"}
    s = summarise(stacks, "11", depth=1)
    assert s["samples"] == 10                                   # idle waiting (Queue.get) is not under the step
    assert s["paths"] == [("execute_model", 7), ("sample_tokens", 3)]      # line numbers merged
    assert s["running"][0] == ("forward (m.py)", 7)
    assert summarise(stacks, "12")["samples"] == 4 and summarise(stacks, "10")["samples"] == 0
    out = tmp_path / "profile.md"
    log = tmp_path / "run.log"
    log.write_text(LOG)
    assert main([str(raw), "--log", str(log), "--rate", "250", "--out", str(out)]) == 0
    text = out.read_text()
    assert "## eagle3 k=2 (engine core pid 11): 10 samples (0.0 s at 250 Hz)" in text and "## none" in text
    try:
        main([str(raw), "--log", str(log), "--out", str(out)])
    except SystemExit as e:
        assert "not overwriting" in str(e)
    else:
        raise AssertionError("overwrote a committed result")
