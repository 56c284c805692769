import subprocess
import sys

import pytest

from bench import load


def test_the_load_generator_works_and_stops_by_itself():
    out = subprocess.run([sys.executable, "-m", "bench.load", "--cores", "1", "--seconds", "0.5"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "1 worker(s)" in out.stderr
    counts = load.work(0.2, 1.0, parent=__import__("os").getppid())
    assert counts > 0                                   # it did work (hashed at least one MiB)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="cores"):
        load.run(0, 1.0)
    with pytest.raises(ValueError, match="duty"):
        load.run(1, 1.0, duty=1.5)
