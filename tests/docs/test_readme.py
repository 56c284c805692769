"""The README stays short and its commands stay the ones CI runs; the documentation's links lead somewhere."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_short():
    assert len(README.splitlines()) <= 120


def test_ci_runs_the_readmes_test_command_verbatim():
    commands = re.findall(r"```sh\n(.*?)\n```", README, re.S)
    test_command = next(c for c in commands if "pytest -q -rs" in c)
    assert test_command in (ROOT / ".ci" / "run").read_text().splitlines()


def test_the_readme_names_the_public_cpu_torch():
    assert "--index-url https://download.pytorch.org/whl/cpu" in README


def _docs() -> list[Path]:
    files = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [ROOT / f for f in files if not f.startswith("bench/results/") or f == "bench/results/README.md"]


def test_relative_links_resolve():
    broken = []
    for doc in _docs():
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken
