"""One table from this folder's bench.quality runs (the same seeded positions: --seed 0 --per-kind 2; quality is
greedy and deterministic, so runs made one after another score the same positions alike): exact rest of line per
model, overall, per language and per position kind, with every post-processing filter on ("all"); with every filter
off ("none") overall only (per-position records keep the "all" scores; each run's summary has the others).

    python -m bench.quality_combine [FOLDER] > FOLDER/table.md     # FOLDER: bench/results/quality-smollm2-fim
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results" / "quality-smollm2-fim"
RUNS = ["base/quality.json", "tuned-a/quality.json", "tuned-b/quality.json", "tuned-noheal/quality.json"]


def main() -> int:
    hits = defaultdict(lambda: defaultdict(lambda: [0, 0]))      # config -> (variant, group) -> [exact, n]
    positions = {}
    for run in RUNS:
        d = json.loads((HERE / run).read_text())
        for name, summ in d["summary"]["configs"].items():
            for variant, v in summ["variants"].items():
                h = hits[name][(variant, "overall")]
                h[0] += round(v["exact"] * v["n"])
                h[1] += v["n"]
        for cfg in d["configs"]:
            for rec in cfg["records"]:
                p = d["positions"][rec["i"]]
                key = (p["file"], p["offset"])
                positions[key] = p
                ok = bool(rec["score"]["all"]["exact"]) if rec.get("score") else False
                for group in ("lang:" + p["language"], "kind:" + p["kind"]):
                    h = hits[cfg["name"]][("all", group)]
                    h[0] += ok
                    h[1] += 1
    names = list(hits)
    groups = sorted({g for c in hits.values() for (_, g) in c}, key=lambda g: (g != "overall", g))
    print("| group | " + " | ".join(f"{n} exact" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    variants = sorted({v for c in hits.values() for (v, _) in c}, key=lambda v: (v != "all", v))
    for variant in variants:
        for g in (groups if variant == "all" else ["overall"]):
            cells = []
            for n in names:
                e, k = hits[n].get((variant, g), [0, 0])
                cells.append(f"{100 * e / k:.1f}% ({e}/{k})" if k else "-")
            print(f"| {g} (filters {variant}) | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
