"""The cause of the 2026-12-03b engine deaths, shown on the GPU with the project's own vLLM backend (one engine start):

1. a token-healed request whose healing step would carry more ``allowed_token_ids`` than vLLM's V2 model runner
   takes (heal=" ": thousands of tokens start with a space) is served by ``VLLMEngine`` without a crash (the fix:
   the step is not sent, ``heal_unconstrained`` counts it);
2. a raw vLLM request with exactly the limit (1024) of allowed ids is served;
3. a raw vLLM request with one more (1025) kills the engine core (EngineDeadError), the log naming the cause;
4. a plain request afterwards fails too (the engine is dead: what every keystroke saw until the restart).

    python bench/vllm/heal_repro.py --out /tmp/res/heal-repro      # result.json there; vLLM's log on stderr
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PREFIX = "def add(a, b):\n    return a +"     # the prompt as healing left it: the prefix's last token " " removed


async def step(res: dict, name: str, coro, timeout: float = 90.0) -> None:
    t0 = time.perf_counter()
    try:
        got = await asyncio.wait_for(coro, timeout)
        res[name] = {"ok": True, "s": round(time.perf_counter() - t0, 3), "got": got}
    except Exception as e:  # noqa: BLE001 -- recorded: this script exists to show which step fails and how
        res[name] = {"ok": False, "s": round(time.perf_counter() - t0, 3), "error": f"{type(e).__name__}: {e}"[:600]}
    print(name, json.dumps(res[name])[:400], flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--model", default="house:target")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from vllm import SamplingParams
    from vllm.inputs import tokens_input

    from completer import healing
    from completer.engine import EngineConfig
    from completer.engine.base import Request
    from completer.engine.vllm.engine import VLLMEngine

    res: dict = {"model": args.model}
    t0 = time.perf_counter()
    e = VLLMEngine(EngineConfig(backend="vllm", model=args.model, speculation="none",
                                gpu_memory_utilization=args.gpu_memory_utilization))
    res["engine_start_s"] = round(time.perf_counter() - t0, 1)
    res["use_v2_model_runner"] = bool(e.llm.vllm_config.use_v2_model_runner)
    res["max_allowed_ids"] = e.max_allowed_ids
    res["allowed_for_space"] = len(healing.allowed_tokens(e.tokenizer, " ", e.n_vocab))
    ids = e.encode(PREFIX)

    async def healed() -> dict:
        text, chunks = "", 0
        async for c in e.generate(Request("healed", ids, max_new_tokens=16, heal=" ")):
            text, chunks = text + c.text, chunks + 1
        return {"text": text, "heal_unconstrained": e.counters()["heal_unconstrained"]}

    async def raw(n: int, rid: str) -> dict:
        p = SamplingParams(max_tokens=1, temperature=0, allowed_token_ids=list(range(n)))
        out = None
        async for out in e.llm.generate(tokens_input(ids), p, rid):
            pass
        return {"token_ids": list(out.outputs[0].token_ids) if out else None}

    async def plain() -> dict:
        text = ""
        async for c in e.generate(Request("plain", ids, max_new_tokens=8)):
            text += c.text
        return {"text": text}

    await step(res, "1_healed_space_with_fix", healed())
    await step(res, "2_raw_allowed_1024", raw(1024, "raw1024"))
    await step(res, "3_raw_allowed_1025", raw(1025, "raw1025"))
    await asyncio.sleep(1.0)
    await step(res, "4_plain_after", plain(), timeout=30)
    (args.out / "result.json").write_text(json.dumps(res, indent=1))
    try:
        await asyncio.wait_for(e.close(), 30)
    except Exception as ex:  # noqa: BLE001
        print("close:", type(ex).__name__, ex, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
