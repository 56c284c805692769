"""GPU: a DFlash drafter written by completer.training.dflash (random weights, the house v2 target's shape) is what
vLLM 0.26 loads as method "dflash": the engine starts, drafts k tokens per step in one proposal, and greedy output
stays the target's (bf16: FlashAttention, which DFlash's bidirectional block needs, has no float32)."""

import torch

from completer.engine.base import Request
from tests.helpers import engine_contract as contract


async def test_a_dflash_drafter_written_here_runs_in_vllm(make_engine, tmp_path):
    from completer.engine.base import open_model
    from completer.training.dflash import DFlashConfig, DFlashDrafter, mask_token
    from completer.models.llama import ModelConfig

    import json

    folder, tok = open_model("house:v2/target")
    target = ModelConfig.from_hf(json.loads((folder / "config.json").read_text()))
    torch.manual_seed(0)
    DFlashDrafter(DFlashConfig.for_target(target, mask_token(tok), block_size=4)).save(tmp_path / "df")
    common = dict(model="house:v2/target", draft=None, dtype="bfloat16")
    plain = make_engine(speculation="none", **common)
    try:
        want = await contract.greedy_outputs(plain, contract.PROMPTS, 24)
    finally:
        await plain.close()
    spec = make_engine(speculation="dflash", drafter=str(tmp_path / "df"), num_speculative_tokens=3, **common)
    try:
        got = await contract.greedy_outputs(spec, contract.PROMPTS, 24)
        counters = spec.counters()
        text, ids, reason = await contract.collect(spec, Request("long", contract.PROMPTS[0], max_new_tokens=64))
    finally:
        await spec.close()
    assert len(counters["draft_per_position"]) == 3 and counters["draft_tokens"] > 0, counters
    same = sum(g == w for g, w in zip(got, want))
    # verification keeps the target's tokens; in bf16 a (k+1)-token verification may turn a near-tie
    assert same >= 0.9 * len(want), f"{same}/{len(want)} identical to the target alone"
    assert reason in ("stop", "length") and ids
