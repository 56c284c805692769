"""bench/vllm/profile_summary.py (run as a program): a py-spy raw profile split per engine core, named from the
run's log."""

import lzma

from tests.helpers.programs import run_program

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
    log = tmp_path / "run.log"
    log.write_text(LOG)
    out = tmp_path / "profile.md"
    run_program("bench.vllm.profile_summary", raw, "--log", log, "--depth", "1", "--rate", "250", "--out", out)
    text = out.read_text()
    eagle, none = text.split("## eagle3 k=2")[1].split("## none")
    # idle waiting (Queue.get) is not under the step: 6 + 3 + 1 samples of pid 11; pid 10 (no engine core) is left out
    assert eagle.startswith(" (engine core pid 11): 10 samples (0.0 s at 250 Hz)")
    assert "| 70.0% | execute_model |\n| 30.0% | sample_tokens |" in eagle            # line numbers merged
    assert "| 70.0% | forward (m.py) |" in eagle
    assert none.startswith(" (engine core pid 12): 4 samples") and "pid 10" not in text
    again = run_program("bench.vllm.profile_summary", raw, "--log", log, "--out", out, check=False)
    assert again.returncode != 0 and "not overwriting" in again.stderr      # never overwrites a committed result
    assert out.read_text() == text
