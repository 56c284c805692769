"""A bounded background load, as a build keeps cores busy while the user types: the "busy" machine of bench.replay.

    python -m bench.load [--cores 1] [--seconds 120] [--duty 1.0]

Starts ``--cores`` worker processes; each runs a busy loop until ``--seconds`` have passed, then exits: it never
outlives its bound, and a worker also stops as soon as the process that started it is gone (so a killed replay
leaves nothing spinning). The loop is what a compiler does to a core: hashing a 1 MiB buffer (integer work plus
memory traffic through the caches), not an idle spin. With ``--duty D`` < 1 a worker works D of every 100 ms and
sleeps the rest. ``bench.replay --load quiet,busy`` runs it (``--cores 1``) around each configuration of the busy
condition and stops it after; the machine's load average is recorded next to every figure either way.

Ctrl-C (or SIGTERM) stops the workers at once. Prints, at the end, how much work each worker did.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import signal
import sys
import time

SLICE_S = 0.1


def work(seconds: float, duty: float, parent: int, done: "mp.Queue | None" = None) -> int:
    """Busy for ``seconds`` (``duty`` of each 100 ms slice), or until ``parent`` is gone; returns the hashes done."""
    buf = os.urandom(1 << 20)
    end = time.monotonic() + seconds
    n = 0
    while True:
        now = time.monotonic()
        if now >= end or os.getppid() != parent:
            break
        stop = min(end, now + SLICE_S * duty)
        while time.monotonic() < stop:
            buf = hashlib.sha256(buf).digest() * (1 << 15)      # 1 MiB again: memory traffic, as a build has
            n += 1
        if duty < 1.0:
            time.sleep(SLICE_S * (1 - duty))
    if done is not None:
        done.put(n)
    return n


def run(cores: int, seconds: float, duty: float = 1.0) -> list[int]:
    """Run ``cores`` workers for ``seconds``; the hashes each did."""
    if cores < 1:
        raise ValueError(f"cores: expected at least 1, got {cores}")
    if not 0 < duty <= 1:
        raise ValueError(f"duty: expected a share in (0, 1], got {duty}")
    done: mp.Queue = mp.Queue()
    procs = [mp.Process(target=work, args=(seconds, duty, os.getpid(), done), daemon=True) for _ in range(cores)]
    for p in procs:
        p.start()

    def stop(*_):
        for p in procs:
            if p.is_alive():
                p.terminate()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for p in procs:
        p.join(seconds + 5)
    return [done.get(timeout=1) for _ in procs if not done.empty()]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cores", type=int, default=1, help="busy worker processes (default 1: one core of a laptop)")
    ap.add_argument("--seconds", type=float, default=120.0, help="stop after this long (default 120)")
    ap.add_argument("--duty", type=float, default=1.0, help="share of each 100 ms a worker is busy (default 1)")
    a = ap.parse_args(argv)
    try:
        counts = run(a.cores, a.seconds, a.duty)
    except ValueError as e:
        raise SystemExit(f"bench.load: {e}") from None
    print(f"bench.load: {a.cores} worker(s), {a.seconds:g} s, duty {a.duty:g}: {counts} MiB hashed", file=sys.stderr)


if __name__ == "__main__":
    main()
