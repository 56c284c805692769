"""Where a vLLM engine's time goes: a py-spy raw profile summarised per process.

Made for ``py-spy record --subprocesses --idle --format raw -- completer tune --backend vllm ...``: every engine core
is a process of its own, so the same requests through ``none`` and ``eagle3`` can be compared side by side. Each
process is named by the configuration its engine core logged (``--log``: the run's output, where vLLM writes
``(EngineCore pid=N) ... speculative_config=...``). For each engine core, the samples under an anchor frame (default:
the engine step, ``EngineCore.step_with_batch_queue``) are split into their call paths ``--depth`` frames deep and
into the frames that were running (self time).

    python -m bench.vllm.profile_summary pyspy.txt.xz --log tune-prof.log --out profile.md
"""

from __future__ import annotations

import argparse
import collections
import lzma
import re
from pathlib import Path

STEP = "EngineCore.step_with_batch_queue"
_LINE = re.compile(r" \(([^()]*?):\d+\)$")
_ENGINE = re.compile(r"EngineCore pid=(\d+)\).*?speculative_config=(None|SpeculativeConfig\(method='(\w+)'.*?"
                     r"num_spec_tokens=(\d+)\))")


def read_stacks(path: Path) -> list[tuple[str, list[str], int]]:
    """(pid, frames below the process's own entry, samples) per line of a py-spy raw file (``.xz`` too). Frames
    are ``function (file)``, line numbers dropped so that one function is one frame."""
    opener = lzma.open if str(path).endswith(".xz") else open
    out = []
    with opener(path, "rt") as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack or not n.isdigit():
                continue
            frames = stack.split(";")
            procs = [i for i, fr in enumerate(frames) if fr.startswith("process ")]
            if not procs:
                continue
            pid = frames[procs[-1]].split(":", 1)[0].removeprefix("process ")
            out.append((pid, [_LINE.sub(r" (\1)", fr) for fr in frames[procs[-1] + 1:]], int(n)))
    return out


def engine_names(log: str) -> dict[str, str]:
    """pid -> configuration (``none``, ``eagle3 k=2``) from the engine cores' start lines in a run's output."""
    names = {}
    for m in _ENGINE.finditer(log):
        names.setdefault(m.group(1), "none" if m.group(2) == "None" else f"{m.group(3)} k={m.group(4)}")
    return names


def summarise(stacks, pid: str, anchor: str = STEP, depth: int = 3, top: int = 15) -> dict:
    """Samples of ``pid`` under ``anchor``: in all, per call path (``depth`` frames below the anchor, short names)
    and per running frame."""
    total, paths, leaves = 0, collections.Counter(), collections.Counter()
    for p, frames, n in stacks:
        if p != pid:
            continue
        at = next((i for i, fr in enumerate(frames) if fr.startswith(anchor + " ")), None)
        if at is None:
            continue
        below = frames[at + 1:]
        total += n
        paths[" > ".join(fr.split(" (")[0] for fr in below[:depth]) or "(the anchor itself)"] += n
        leaves[below[-1] if below else frames[at]] += n
    return {"samples": total, "paths": paths.most_common(top), "running": leaves.most_common(top)}


def report(stacks, names: dict[str, str], anchor: str, depth: int, rate: float | None) -> str:
    lines = [f"# Engine-core samples under `{anchor}`", ""]
    for pid, name in sorted(names.items(), key=lambda kv: kv[1]):
        s = summarise(stacks, pid, anchor, depth)
        if not s["samples"]:
            continue
        secs = f" ({s['samples'] / rate:.1f} s at {rate:g} Hz)" if rate else ""
        lines += [f"## {name} (engine core pid {pid}): {s['samples']} samples{secs}", "",
                  "| share | call path |", "|---|---|"]
        lines += [f"| {100 * n / s['samples']:.1f}% | {p} |" for p, n in s["paths"]]
        lines += ["", "| share | running frame |", "|---|---|"]
        lines += [f"| {100 * n / s['samples']:.1f}% | {p} |" for p, n in s["running"]]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", type=Path, help="py-spy raw output (.txt or .txt.xz)")
    ap.add_argument("--log", type=Path, required=True, help="the profiled run's output (names the engine cores)")
    ap.add_argument("--anchor", default=STEP)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--rate", type=float, default=None, help="py-spy's sampling rate, to show seconds")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    names = engine_names(args.log.read_text(errors="replace"))
    if not names:
        raise SystemExit(f"{args.log}: no vLLM engine core start lines (EngineCore pid=N ... speculative_config=)")
    text = report(read_stacks(args.profile), names, args.anchor, args.depth, args.rate)
    if args.out:
        if args.out.exists():
            raise SystemExit(f"{args.out} exists; not overwriting it")
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
