"""bench/speculation.py runs end to end (tiny pair, two prompts) and writes JSON, markdown and a plot."""

import json
import sysconfig
from pathlib import Path

from tests.helpers.programs import run_program


def test_speculation_bench_small_run(tiny_pair, tmp_path):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [str(stdlib / n) for n in ("textwrap.py", "bisect.py", "heapq.py", "fnmatch.py", "shlex.py")]
    out = tmp_path / "spec"
    run_program("bench.speculation", "--model", tiny_pair[0], "--draft", tiny_pair[1], "--prompts", "2", "--repeats",
                "1", "--max-tokens", "8", "--ks", "1", "3", "--files", *files, "--out", out)
    res = json.loads(out.with_suffix(".json").read_text())
    names = [r["config"] for r in res["rows"]]
    assert names[:3] == ["none", "draft k=1", "draft k=3"] and "ngram k=4" in names and "draft adaptive" in names
    assert res["identical_greedy_outputs"] is True
    assert res["prompts"] == 2 and res["machine"]["cores"] >= 1
    for r in res["rows"]:
        assert r["latency_ms_median"] > 0 and r["generated_tokens"] > 0
        if "draft" in r["speculation"]:         # (n-gram may find no match in 2 short random outputs)
            assert r["draft_tokens"] > 0
    assert "| draft k=3 |" in out.with_suffix(".md").read_text()
    assert out.with_suffix(".png").stat().st_size > 1000
