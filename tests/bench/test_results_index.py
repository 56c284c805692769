"""bench/results/README.md indexes every committed result: a folder (or file) added without a row fails here, as
does a row whose result is gone; nothing under results is a Python script (scripts live in bench/)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def committed_entries() -> set[str]:
    """Top-level entries of bench/results (vllm's dated folders and files one level down), as git tracks them."""
    files = subprocess.run(["git", "ls-files", "bench/results"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    out = set()
    for f in files:
        parts = Path(f).parts[2:]
        if parts == ("README.md",):
            continue
        out.add("/".join(parts[:2]) if parts[0] == "vllm" and len(parts) > 1 else parts[0])
    return out


def test_every_committed_result_has_a_row_and_every_row_a_result():
    index = (RESULTS / "README.md").read_text()
    linked = {m.rstrip("/").split("/")[0] if not m.startswith("vllm/") else "/".join(m.split("/")[:2])
              for m in re.findall(r"\]\(([^)#]+)\)", index)}
    missing = sorted(e for e in committed_entries() if e not in linked)
    assert not missing, f"results without a row in bench/results/README.md: {missing}"
    gone = sorted(m for m in linked if not (RESULTS / m).exists())
    assert not gone, f"rows of bench/results/README.md whose result is gone: {gone}"


def test_no_scripts_under_results():
    scripts = [str(p.relative_to(ROOT)) for p in RESULTS.rglob("*.py")]
    assert not scripts, f"scripts live in bench/, not in results: {scripts}"
