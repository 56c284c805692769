"""editors/ci-setup.sh says what it will change before it changes anything (sudo apt-get, ~850 MB of code-server in a
cache), and how to skip the large part."""

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "editors" / "ci-setup.sh"


def _plan(**env) -> str:
    r = subprocess.run(["bash", str(SCRIPT), "--plan"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **env})
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_plan_names_apt_the_cache_and_the_skip(tmp_path):
    out = _plan(COMPLETER_CI_CACHE=str(tmp_path / "cache"))
    assert "apt-get" in out and "850 MB" in out
    assert str(tmp_path / "cache" / "code-server-") in out
    assert "COMPLETER_SKIP_CODE_SERVER=1" in out
    assert not (tmp_path / "cache").exists()                      # --plan changes nothing


def test_skipping_code_server_is_said():
    assert "code-server: skipped" in _plan(COMPLETER_SKIP_CODE_SERVER="1")
