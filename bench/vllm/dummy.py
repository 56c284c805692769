"""Issue 8 (2): real-size shapes with random weights (``load_format="dummy"``): the speed a 7B target and a 0.5B draft
have on this GPU, without their weights.

Writes ``config.json`` for a Qwen2.5-Coder-7B-like target and a Qwen2.5-Coder-0.5B-like draft (Qwen2ForCausalLM,
their published hidden sizes, layers, heads, KV heads, vocabulary) and a word-level tokenizer covering the whole
vocabulary (random weights emit any id; every id must decode). Then, per model, in its own engine with CUDA graphs,
bf16, one request at a time: time per decode step (= per target/draft forward of one token at a ~512-token context:
(latency - TTFT) / (tokens - 1)), and prefill time (TTFT) of fresh 2k- and 4k-token prompts. Also the decode floor
set by memory bandwidth: bytes of weights / 4.8 TB/s (H200 HBM3e).

    python bench/vllm/dummy.py --out $OUT/vllm [--tensor-parallel-size 2]
    python bench/vllm/dummy.py --out $OUT/vllm --only target-7b --quant none,fp8 --concurrent 1,5 --deadline-s 400
    python bench/vllm/dummy.py --out $OUT/vllm --only target-7b --concurrent 1,5 --eagle3-ks 4,6 --deadline-s 540

``--quant fp8`` passes ``quantization="fp8"`` to vLLM (weights quantised to fp8 per tensor when loaded, activations
per token at run time). ``--concurrent 1,5``: also time decode steps of n requests at once (a forward over n tokens,
as a speculative verification of k = n - 1 drafts is; CUDA graphs are captured for n too).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

from common import base_parser, counters_delta, engine_overrides, machine, summary, timed, write_json  # noqa: E402

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


def write_model(folder: Path, shape: dict, tokenizer: str = "words") -> Path:
    """config.json of a Qwen2 model of ``shape`` (weights come from load_format=dummy) and a tokenizer covering its
    vocabulary: ``words`` ("t0".."tN") or ``house`` (the house tokenizer, padded: see write_house_tokenizer), with
    which the language server serves the model with the house FIM template."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu", rms_norm_eps=1e-6,
               rope_theta=1000000.0, max_position_embeddings=32768, max_window_layers=28, use_sliding_window=False,
               sliding_window=None, attention_dropout=0.0, initializer_range=0.02, torch_dtype="bfloat16",
               bos_token_id=None, eos_token_id=0, use_cache=True, **shape)
    if tokenizer == "house":
        # Llama with q/k/v/o biases (Qwen2 has q/k/v only: 0.1 M parameters apart at 7B): transformers replaces a
        # qwen2 folder's tokenizer decoder with its own (Qwen2Tokenizer), which would undo the padding's decoder
        for k in ("max_window_layers", "use_sliding_window", "sliding_window"):
            cfg.pop(k)
        cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=True,
                   completer_template="house")
        write_house_tokenizer(folder, shape["vocab_size"])
    elif tokenizer == "words":
        write_tokenizer(folder, shape["vocab_size"])
    else:
        raise ValueError(f"tokenizer must be 'words' or 'house', got {tokenizer!r}")
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 0}))
    return folder


PAD_MARK = "\u2983{}\u2984"      # ⦃i⦄: outside the byte-level alphabet, so no real token contains it


def write_house_tokenizer(folder: Path, vocab: int) -> None:
    """The house tokenizer (``completer/models/house/target``) with its BPE vocabulary padded to ``vocab`` ids, so
    that a random-weight model of a real shape (152k ids) can be served with the house prompt format: encoding is
    unchanged (the padding tokens have no merges, so BPE never produces them), and padding id i decodes to the text
    of house token 6 + (i - n) mod (n - 6) (a decoder step strips its ⦃i⦄ mark), so whatever id the model emits
    becomes ordinary house text — code pieces, newlines at the house vocabulary's rate — never a special token."""
    from completer.models import HOUSE_DIR

    src = HOUSE_DIR / "target"
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    base = tj["model"]["vocab"]
    n = len(base)
    if vocab < n:
        raise ValueError(f"vocab {vocab} is smaller than the house vocabulary ({n})")
    by_id = {i: t for t, i in base.items()}
    for i in range(n, vocab):
        base[by_id[6 + (i - n) % (n - 6)] + PAD_MARK.format(i)] = i
    tj["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"Regex": "\u2983[0-9]+\u2984"}, "content": ""}, tj["decoder"]]}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).is_file():
            (folder / name).write_text((src / name).read_text(encoding="utf-8"), encoding="utf-8")


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


def fp8_bytes(s: dict) -> int:
    """Bytes of weights with vLLM's quantization="fp8": linear layers 1 byte/param, embeddings, lm_head, norms and
    biases stay bf16."""
    h, i, L, v = s["hidden_size"], s["intermediate_size"], s["num_hidden_layers"], s["vocab_size"]
    kv = s["num_key_value_heads"] * (h // s["num_attention_heads"])
    linear = L * (2 * h * h + 2 * h * kv + 3 * h * i)
    return linear + 2 * (params(s) - linear)


async def concurrent_steps(engine, rng, v: int, n: int, reps: int, tokens: int, prompt_len: int) -> dict:
    """Decode steps with ``n`` requests running at once: per rep, (latency - TTFT) / (tokens - 1) of the request
    whose first token came last (every step after it decodes all n, as they finish together)."""
    steps, per_request = [], []
    for i in range(reps):
        rs = await asyncio.gather(*[timed(engine, Request(f"c{n}-{i}-{j}", random_prompt(rng, prompt_len, v),
                                                          max_new_tokens=tokens)) for j in range(n)])
        per = [(r["latency_s"] - r["ttft_s"]) / (r["tokens"] - 1) if r["tokens"] > 1 else None for r in rs]
        per_request.append(per)
        last = max(range(n), key=lambda j: rs[j]["ttft_s"] or 0)
        steps.append(per[last])
    return {"n": n, "prompt_len": prompt_len, "decode_tokens": tokens, "step_s": summary(steps),
            "per_request_step_s": per_request}


def start_engine(args, folder: Path, quant: str | None, capture_sizes=(), **speculation) -> "VLLMEngine":
    """A vLLM engine on the dummy-weight model in ``folder`` (bf16, or ``quant``), with the given speculation
    settings; ``capture_sizes`` adds CUDA-graph batch sizes (the concurrency runs)."""
    from completer.engine.vllm.engine import VLLMEngine

    overrides = engine_overrides(max_model_len=8192)
    if capture_sizes:
        sizes = overrides["compilation_config"]["cudagraph_capture_sizes"]
        overrides["compilation_config"]["cudagraph_capture_sizes"] = sorted(set(sizes) | set(capture_sizes))
    if quant:
        overrides["quantization"] = quant
    return VLLMEngine(EngineConfig(backend="vllm", model=str(folder), dtype="bfloat16", load_format="dummy",
                                   tensor_parallel_size=args.tensor_parallel_size,
                                   gpu_memory_utilization=args.gpu_memory_utilization,
                                   enforce_eager=args.enforce_eager, **speculation), **overrides)


async def measure(args, name: str, folder: Path, shape: dict, quant: str | None = None) -> dict:
    rng = random.Random(name)
    t0 = time.perf_counter()
    engine = start_engine(args, folder, quant, capture_sizes=args.concurrent, speculation="none", draft=None)
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
        concurrent = {}
        for n in args.concurrent:
            try:
                concurrent[str(n)] = await concurrent_steps(engine, rng, v, n, args.reps, args.decode_tokens,
                                                            args.concurrent_prompt_len)
            except Exception as e:
                print(f"{name} concurrent n={n} failed: {type(e).__name__}: {e}", flush=True)
                concurrent[str(n)] = {"error": f"{type(e).__name__}: {e}"}
    finally:
        await engine.close()
        await asyncio.sleep(2)
    p = params(shape)
    wbytes = fp8_bytes(shape) if quant == "fp8" else 2 * p
    floor = wbytes / HBM_BYTES_PER_S / args.tensor_parallel_size
    res = {"shape": shape, "params": p, "quantization": quant, "weight_bytes_bf16": 2 * p, "weight_bytes": wbytes,
           "floor_1_byte_per_param_s": p / HBM_BYTES_PER_S / args.tensor_parallel_size,
           "engine_overrides": overrides, "startup_s": startup, "concurrent": concurrent,
           "decode_step_s": summary(steps), "prefill_s": prefill, "bandwidth_floor_s": floor,
           "floor_fraction": floor / summary(steps)["median"] if steps else None}
    print(f"{name} quant={quant}: {p/1e9:.2f} B params, decode step {res['decode_step_s']['median']*1e3:.2f} ms "
          f"(floor {floor*1e3:.2f} ms), prefill 2k {prefill['2048']['median']*1e3:.1f} ms, "
          f"4k {prefill['4096']['median']*1e3:.1f} ms; concurrent " +
          ", ".join(f"n={n} {c['step_s']['median']*1e3:.2f} ms" for n, c in concurrent.items() if "step_s" in c),
          flush=True)
    return res


def write_drafter(folder: Path, shape: dict, draft_vocab: int = 32000) -> Path:
    """config.json of an EAGLE-3 drafter for a target of ``shape`` as `completer train-drafter` writes it (one layer
    at the target's hidden size, 3 aux depths, a 32k draft vocabulary as published EAGLE-3 drafters for 150k
    vocabularies use); random weights come from load_format=dummy."""
    from types import SimpleNamespace

    from completer.training.drafter import DrafterConfig

    t = SimpleNamespace(**shape, head_dim=shape["hidden_size"] // shape["num_attention_heads"], rms_norm_eps=1e-6,
                        rope_theta=1000000.0, max_position_embeddings=32768)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(DrafterConfig.for_target(t, draft_vocab_size=draft_vocab).to_hf(),
                                                   indent=1))
    return folder


async def measure_eagle3(args, folder: Path, drafter: Path, shape: dict, k: int, quant: str | None) -> dict:
    """Decode steps of the 7B-shape target with an EAGLE-3 drafter, both random: with random weights almost no
    draft is accepted, so every step is one verification of k+1 tokens plus k drafter forwards, and
    step time = (latency - TTFT) / (tokens - 1) * tokens per step. Its ratio to a plain decode step gives the
    c of E/(k*c + 1) (drafter and verification overhead together)."""
    rng = random.Random(f"eagle3-{k}")
    t0 = time.perf_counter()
    engine = start_engine(args, folder, quant, speculation="eagle3", drafter=str(drafter), num_speculative_tokens=k)
    startup = time.perf_counter() - t0
    v = shape["vocab_size"]
    try:
        for i in range(3):
            await timed(engine, Request(f"w{i}", random_prompt(rng, 512, v), max_new_tokens=32))
        before = engine.counters()
        per_token = []
        for i in range(args.reps):
            r = await timed(engine, Request(f"d{i}", random_prompt(rng, 512, v), max_new_tokens=args.decode_tokens))
            if r["tokens"] > 1:
                per_token.append((r["latency_s"] - r["ttft_s"]) / (r["tokens"] - 1))
        spec = counters_delta(engine.counters(), before)
    finally:
        await engine.close()
        await asyncio.sleep(2)
    tps = spec["mean_tokens_per_step"]
    step = summary([t * tps for t in per_token])
    res = {"k": k, "quantization": quant, "drafter_config": json.loads((drafter / "config.json").read_text()),
           "startup_s": startup, "per_token_s": summary(per_token), "tokens_per_step": tps, "spec": spec,
           "step_s": step}
    print(f"eagle3 k={k} quant={quant}: step {step['median']*1e3:.2f} ms (tokens/step {tps:.3f}), "
          f"start {startup:.0f} s", flush=True)
    return res


async def main() -> None:
    p = base_parser(__doc__)
    p.add_argument("--models-dir", type=Path, default=Path("/tmp/completer-dummy-models"))
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--write-only", action="store_true", help="write the model folders and stop")
    p.add_argument("--tokenizer", choices=["words", "house"], default="words",
                   help="house: the padded house tokenizer (for serving the shape through the language server)")
    p.add_argument("--only", default=",".join(SHAPES), help="comma-separated shapes, in this order")
    p.add_argument("--quant", default="none", help="comma-separated: none (bf16) and/or fp8, in this order")
    p.add_argument("--concurrent", default="", help="comma-separated n: decode steps with n requests at once")
    p.add_argument("--concurrent-prompt-len", type=int, default=400)
    p.add_argument("--deadline-s", type=float, default=None, help="start no engine later than this minus "
                   "--engine-s seconds after start")
    p.add_argument("--engine-s", type=float, default=110.0)
    p.add_argument("--eagle3-ks", default="", help="comma-separated k: target-7b with a random EAGLE-3 drafter, "
                   "after the shapes (step time of verification + drafting)")
    p.add_argument("--eagle3-quant", default="none", help="target quantization for the eagle3 runs: none and/or fp8")
    args = p.parse_args()
    args.concurrent = [int(n) for n in args.concurrent.split(",") if n]
    t_start = time.perf_counter()
    folders = {n: write_model(args.models_dir / n, SHAPES[n], args.tokenizer) for n in args.only.split(",") if n}
    if args.write_only:     # the folders and each shape's parameter count, as JSON
        print(json.dumps({n: {"folder": str(f), "params": params(SHAPES[n])} for n, f in folders.items()}))
        return
    results = {}
    runs = [(name, q) for name in args.only.split(",") if name for q in args.quant.split(",")]
    eagle = [(int(k), q) for q in args.eagle3_quant.split(",") for k in args.eagle3_ks.split(",") if k]
    if eagle:
        target = write_model(args.models_dir / "target-7b", SHAPES["target-7b"])
        drafter = write_drafter(args.models_dir / "eagle3-7b", SHAPES["target-7b"])
    for name, q in runs + [(f"eagle3 k={k}", q) for k, q in eagle]:
        quant = None if q == "none" else q
        key = name if quant is None else f"{name}-{quant}"
        if name.startswith("eagle3"):
            left = None if args.deadline_s is None else args.deadline_s - (time.perf_counter() - t_start)
            if left is not None and left < args.engine_s:
                print(f"{key} skipped: {left:.0f} s left before the deadline", flush=True)
                continue
            try:
                results[key] = await measure_eagle3(args, target, drafter, SHAPES["target-7b"],
                                                    int(name.split("=")[1]), quant)
            except Exception as e:
                print(f"{key} failed: {type(e).__name__}: {e}", flush=True)
                results[key] = {"quantization": quant, "error": f"{type(e).__name__}: {e}"}
            write_json(args.out, f"dummy_tp{args.tensor_parallel_size}.json",
                       {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "results": results})
            continue
        shape = SHAPES[name]
        left = None if args.deadline_s is None else args.deadline_s - (time.perf_counter() - t_start)
        if left is not None and left < args.engine_s:
            print(f"{key} skipped: {left:.0f} s left before the deadline", flush=True)
            results[key] = {"shape": shape, "quantization": quant, "error": f"skipped: {left:.0f} s left"}
            continue
        try:
            results[key] = await measure(args, name, folders[name], shape, quant)
        except Exception as e:
            print(f"{key} failed: {type(e).__name__}: {e}", flush=True)
            results[key] = {"shape": shape, "quantization": quant, "error": f"{type(e).__name__}: {e}"}
        write_json(args.out, f"dummy_tp{args.tensor_parallel_size}.json",
                   {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "results": results})


if __name__ == "__main__":
    asyncio.run(main())
