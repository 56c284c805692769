"""Issue 8 (2): real-size shapes with random weights (``load_format="dummy"``): the speed a 7B target and a 0.5B draft
have on this GPU, without their weights.

Writes ``config.json`` for a Qwen2.5-Coder-7B-like target and a Qwen2.5-Coder-0.5B-like draft (Qwen2ForCausalLM,
their published hidden sizes, layers, heads, KV heads, vocabulary) and a word-level tokenizer covering the whole
vocabulary (random weights emit any id; every id must decode). Then, per model, in its own engine with CUDA graphs,
bf16, one request at a time: time per decode step (= per target/draft forward of one token at a ~512-token context:
(latency - TTFT) / (tokens - 1)), and prefill time (TTFT) of fresh 2k- and 4k-token prompts. Also the decode floor
set by memory bandwidth: bytes of weights / 4.8 TB/s (H200 HBM3e).

    python bench/vllm/dummy.py --out $OUT/vllm [--tensor-parallel-size 2]
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

from common import base_parser, engine_overrides, machine, summary, timed, write_json  # noqa: E402

from completer.engine import EngineConfig, Request  # noqa: E402

HBM_BYTES_PER_S = 4.8e12

SHAPES = {   # from the Qwen2.5-Coder-7B / -0.5B config.json files as published
    "target-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                      num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    "draft-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                       num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
}


def params(s: dict) -> int:
    """Parameter count of a Qwen2 model of shape ``s`` (q/k/v biases included)."""
    h, i, L, v = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"], s["vocab_size"]
    d = h // s["num_attention_heads"]
    kv = s["num_key_value_heads"] * d
    attn = h * h + h + 2 * (h * kv + kv) + h * h
    layer = attn + 3 * h * i + 2 * h
    return v * h * (1 if s["tie_word_embeddings"] else 2) + L * layer + h


def write_model(folder: Path, shape: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu", rms_norm_eps=1e-6,
               rope_theta=1000000.0, max_position_embeddings=32768, max_window_layers=28, use_sliding_window=False,
               sliding_window=None, attention_dropout=0.0, initializer_range=0.02, torch_dtype="bfloat16",
               bos_token_id=None, eos_token_id=0, use_cache=True, **shape)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))
    write_tokenizer(folder, shape["vocab_size"])
    return folder


def write_tokenizer(folder: Path, vocab: int) -> None:
    """A word-level tokenizer whose tokens are "t0".."t{vocab-1}" (t0 = end of text), space-separated."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t1"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)     # joins tokens with spaces
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "t0", "unk_token": "t1",
         "model_max_length": 32768, "clean_up_tokenization_spaces": False}))


def random_prompt(rng: random.Random, n: int, vocab: int) -> list[int]:
    return [rng.randrange(2, min(vocab, 150000)) for _ in range(n)]


async def measure(args, name: str, folder: Path, shape: dict) -> dict:
    from completer.engine.vllm_engine import VLLMEngine

    rng = random.Random(name)
    t0 = time.perf_counter()
    engine = VLLMEngine(EngineConfig(backend="vllm", model=str(folder), speculation="none", draft=None,
                                     dtype="bfloat16", load_format="dummy",
                                     tensor_parallel_size=args.tensor_parallel_size,
                                     gpu_memory_utilization=args.gpu_memory_utilization,
                                     enforce_eager=args.enforce_eager), **engine_overrides(max_model_len=8192))
    startup = time.perf_counter() - t0
    v = shape["vocab_size"]
    try:
        for i in range(3):
            await timed(engine, Request(f"w{i}", random_prompt(rng, 512, v), max_new_tokens=32))
            await timed(engine, Request(f"wp{i}", random_prompt(rng, 2048, v), max_new_tokens=1))
        steps = []
        for i in range(args.reps):
            r = await timed(engine, Request(f"d{i}", random_prompt(rng, 512, v), max_new_tokens=args.decode_tokens))
            if r["tokens"] > 1:
                steps.append((r["latency_s"] - r["ttft_s"]) / (r["tokens"] - 1))
        prefill = {}
        for n in (2048, 4096):
            prefill[str(n)] = summary([(await timed(engine, Request(f"p{n}-{i}", random_prompt(rng, n, v),
                                                                    max_new_tokens=1)))["ttft_s"]
                                       for i in range(args.reps)])
    finally:
        await engine.close()
        await asyncio.sleep(2)
    p = params(shape)
    floor = 2 * p / HBM_BYTES_PER_S / args.tensor_parallel_size
    res = {"shape": shape, "params": p, "weight_bytes_bf16": 2 * p, "startup_s": startup,
           "decode_step_s": summary(steps), "prefill_s": prefill, "bandwidth_floor_s": floor,
           "floor_fraction": floor / summary(steps)["median"] if steps else None}
    print(f"{name}: {p/1e9:.2f} B params, decode step {res['decode_step_s']['median']*1e3:.2f} ms "
          f"(floor {floor*1e3:.2f} ms), prefill 2k {prefill['2048']['median']*1e3:.1f} ms, "
          f"4k {prefill['4096']['median']*1e3:.1f} ms", flush=True)
    return res


async def main() -> None:
    p = base_parser(__doc__)
    p.add_argument("--models-dir", type=Path, default=Path("/tmp/completer-dummy-models"))
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--write-only", action="store_true", help="write the model folders and stop")
    args = p.parse_args()
    folders = {n: write_model(args.models_dir / n, s) for n, s in SHAPES.items()}
    if args.write_only:
        print({n: str(f) for n, f in folders.items()})
        return
    results = {}
    for name, shape in SHAPES.items():
        try:
            results[name] = await measure(args, name, folders[name], shape)
        except Exception as e:
            print(f"{name} failed: {type(e).__name__}: {e}", flush=True)
            results[name] = {"shape": shape, "error": f"{type(e).__name__}: {e}"}
        write_json(args.out, f"dummy_tp{args.tensor_parallel_size}.json",
                   {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "results": results})


if __name__ == "__main__":
    asyncio.run(main())
