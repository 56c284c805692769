"""bench.load, run as the program the replay's busy condition runs."""

import subprocess
import sys


def _load(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.load", *args], capture_output=True, text=True, timeout=120)


def test_the_load_generator_works_and_stops_by_itself():
    out = _load("--cores", "1", "--seconds", "0.5")
    assert out.returncode == 0, out.stderr
    assert "1 worker(s), 0.5 s" in out.stderr
    hashed = out.stderr.rsplit("[", 1)[1].split("]")[0]
    assert int(hashed) > 0                            # it did work (hashed at least one MiB) and then stopped


def test_bad_arguments_are_refused():
    for args, what in ((("--cores", "0"), "cores"), (("--duty", "1.5"), "duty")):
        out = _load(*args, "--seconds", "0.1")
        assert out.returncode != 0 and what in out.stderr
