from bench import start


def test_summary_of_cold_starts_per_kind_caches_and_checkout():
    runs = [{"kind": "cli", "caches": "cold", "checkout": "this", "wall_s": w, "cpu_s": c,
             "loadavg_before": f"{la} 1 1 1/1 1"} for w, c, la in ((3.0, 2.0, 1.0), (1.0, 1.5, 2.0), (2.0, 1.0, 0.5))]
    runs += [{"kind": "lsp", "caches": "cold", "checkout": "base", "wall_s": None, "cpu_s": 4.0,
              "loading_answers": 2, "loadavg_before": None},
             {"kind": "lsp", "caches": "first", "checkout": "this", "wall_s": 9.0, "cpu_s": 8.0}]
    rows = {(r["kind"], r["caches"], r["checkout"]): r for r in start.summarize(runs)}
    cli = rows["cli", "cold", "this"]
    assert (cli["runs"], cli["answered"], cli["wall_median_s"], cli["wall_min_s"], cli["cpu_median_s"]) == (
        3, 3, 2.0, 1.0, 1.5)
    assert cli["loadavg_1min_range"] == [0.5, 2.0]
    base = rows["lsp", "cold", "base"]
    assert base["answered"] == 0 and base["wall_median_s"] is None and base["loading_answers"] == 2
    assert rows["lsp", "first", "this"]["wall_median_s"] == 9.0
    md = start.markdown({"date": "d", "machine": {"cpu": "C", "cores": 2, "platform": "p", "python": "3"},
                         "command": "python -m bench.start", "model": None, "runs": runs}, start.summarize(runs))
    assert "| cli | cold | this | 3 | 2.00 |" in md
