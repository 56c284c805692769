"""A draft model for someone else's target (``completer train --draft-for TARGET``): the target's tokenizer, plain
left-to-right next-token cross-entropy on code, the target never loaded.

Why: speculation pays only when the draft costs a small fraction of a target step. The house pair is so small that
its draft costs too much of it; a public target such as SmolLM2-135M (``gguf:smollm2``, 13x the house target) with a
few-M-parameter draft is the case the product is for. The draft must share the target's vocabulary (the engines
check it), so it takes the target's tokenizer; at SmolLM2's 49152 ids the tied embedding/LM head is most of the
draft, so its width is kept small (``DRAFT_FOR``: hidden 96, 4 layers, about 5.1M parameters, 4.7M of them the
embedding) for CPU speed and a small shipped file (int4: about 2.9 MB).

Objective: SmolLM2 has no FIM tokens and is prompted with the ``plain`` template (a comment line naming the file,
then the code before the cursor), so the draft learns left to right on files written the same way: ``{comment}
{file name}:`` then the text, files separated by the target's end-of-text token. No distillation: the 98 MB GGUF
target cannot travel to the GPU next to the working tree (64 MiB per call) and computing its logits on a CPU is far
too slow for millions of tokens; cross-entropy on the data the target was also trained to model is the cheap
stand-in (see the model's REPORT.md).

``TARGET`` may be ``gguf:smollm2``, a ``.gguf`` file, a model folder, or a folder with only ``config.json`` and
``tokenizer.json`` (all that is needed: how the draft is trained on a machine without the target's weights).

Also here: held-out cross-entropy per language (``heldout_ce``) and the acceptance of a trained draft against its
real target along the target's greedy continuation of plain prompts (``python -m completer.training.draft_for
accept``, CPU is fine), and ``subset``: a smaller corpus archive to carry to a device.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .evaluate import acceptance_by_position
from ..models.llama import LlamaForCausalLM, ModelConfig
from ..models.tokenizer import load_tokenizer

DRAFT_FOR = ModelConfig(vocab_size=49152, hidden_size=96, intermediate_size=256, num_hidden_layers=4,
                        num_attention_heads=2, num_key_value_heads=1, head_dim=48, max_position_embeddings=8192,
                        rope_theta=100000.0)
COMMENT = {"python": "#", "c": "//", "go": "//", "javascript": "//", "typescript": "//", "rust": "//"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
LOCAL_PYTHON = "python"          # --corpus value: this machine's Python train split (corpus.iter_files)


def target_folder(spec: str) -> Path:
    """The folder holding the target's config.json and tokenizer.json: a folder as given (weights not needed),
    else whatever ``resolve_model`` makes of ``spec`` (gguf:smollm2, a .gguf file, house:...)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        for name in ("config.json", "tokenizer.json"):
            if not (path / name).is_file():
                raise FileNotFoundError(f"{path} has no {name} (--draft-for needs the target's config and tokenizer)")
        return path
    from ..models import resolve_model
    return resolve_model(spec)


def draft_config(target: Path, hidden: int, layers: int) -> ModelConfig:
    """DRAFT_FOR at width ``hidden`` and depth ``layers``, with the target's vocabulary, positions and RoPE base."""
    t = json.loads((target / "config.json").read_text())
    heads = max(1, hidden // 48)
    return ModelConfig(vocab_size=int(t["vocab_size"]), hidden_size=hidden,
                       intermediate_size=max(64, (hidden * 8 // 3) // 32 * 32), num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=1, head_dim=hidden // heads,
                       max_position_embeddings=int(t.get("max_position_embeddings", 2048)),
                       rope_theta=float(t.get("rope_theta", 10000.0)), tie_word_embeddings=True,
                       rms_norm_eps=float(t.get("rms_norm_eps", 1e-5)), bos_token_id=t.get("bos_token_id"),
                       eos_token_id=t.get("eos_token_id"))


def separator_id(tok, target: Path) -> int:
    """The id between documents: ``<|endoftext|>`` when the vocabulary has it (SmolLM2's pretraining separator),
    else the target's eos."""
    eot = tok.token_to_id("<|endoftext|>")
    if eot is not None:
        return eot
    eos = json.loads((target / "config.json").read_text()).get("eos_token_id")
    return int(eos[0] if isinstance(eos, list) else eos)


def header(path: str, language: str) -> str:
    """The line ``completer.context`` puts above a plain prompt's code: ``# name.py:`` / ``// name.go:``."""
    return f"{COMMENT.get(language, '#')} {Path(path).name}:\n"


def local_python(split: str, max_bytes: int) -> list[tuple[str, str, str]]:
    """(relpath, "python", text) of this machine's Python ``split`` (v1's corpus and held-out rule), sampled in
    sha1(relpath) order up to ``max_bytes`` so a cap takes from every package, not the alphabetically first."""
    from . import corpus

    files = sorted(corpus.iter_files(split), key=lambda f: hashlib.sha1(b"order:" + f[0].encode()).hexdigest())
    out, total = [], 0
    for rel, path in files:
        text = corpus.read_source(path)
        if text is None or max(map(len, text.split("\n"))) > 400:
            continue
        out.append((rel, "python", text))
        total += len(text)
        if total >= max_bytes:
            break
    return out


def corpus_files(sources: list[str], max_bytes: int) -> list[tuple[str, str, str]]:
    """(path, language, text) from each ``--corpus`` source (an archive, or ``python``: this machine's Python
    train split), up to ``max_bytes`` of text per source."""
    from . import corpus

    out: list[tuple[str, str, str]] = []
    for src in sources:
        if src == LOCAL_PYTHON:
            out += local_python("train", max_bytes)
        else:
            out += list(corpus.read_archive(src, max_bytes))
    return out


def encode_plain(files: list[tuple[str, str, str]], tok, sep: int, batch: int = 512) -> np.ndarray:
    """One token stream: each file as ``header + text`` then the separator (int32; no FIM, no token straddles a
    file boundary)."""
    out: list[np.ndarray] = []
    for i in range(0, len(files), batch):
        part = files[i:i + batch]
        for enc in tok.encode_batch([header(p, lang) + text for p, lang, text in part], add_special_tokens=False):
            out.append(np.asarray(enc.ids + [sep], dtype=np.int32))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int32)


@torch.no_grad()
def heldout_ce(model, tok, sep: int, groups: dict[str, list[tuple[str, str, str]]], device, seq_len: int = 1024,
               max_mb: float = 0.3, batch: int = 8) -> dict[str, dict]:
    """Per language: mean next-token cross-entropy of ``model`` on up to ``max_mb`` of held-out text (plain
    windows of ``seq_len``), per token and per character."""
    from .fim import pack

    model.eval()
    out = {}
    for lang, files in sorted(groups.items()):
        take, size = [], 0
        for f in files:
            if size >= max_mb * 1e6:
                break
            take.append(f)
            size += len(f[2])
        stream = encode_plain(take, tok, sep)
        windows = torch.from_numpy(pack(stream, seq_len).astype(np.int64))
        if len(windows) == 0:
            continue
        total, n = 0.0, 0
        for i in range(0, len(windows), batch):
            w = windows[i:i + batch].to(device)
            logits = model(w[:, :-1]).float()
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1),
                                     reduction="sum").item()
            n += w[:, 1:].numel()
        chars_per_token = size / max(1, len(stream))
        out[lang] = {"loss_per_token": total / n, "loss_per_char": total / n / chars_per_token,
                     "chars_per_token": chars_per_token, "tokens": n, "files": len(take)}
    return out


def heldout_groups(archive: str | None, local: bool, max_mb: float) -> dict[str, list[tuple[str, str, str]]]:
    """Held-out files by language: from a corpus archive and/or this machine's Python held-out split."""
    from . import corpus

    groups: dict[str, list[tuple[str, str, str]]] = {}
    if archive:
        for f in corpus.read_archive(archive):
            groups.setdefault(f[1], []).append(f)
    if local:
        groups["python-local"] = local_python("heldout", int(max_mb * 1e6))
    return groups


def target_template(target: Path) -> str:
    """The prompt template the target is used with (``completer.prompt.template_for_model``; ``plain`` when its
    folder shows no FIM tokens)."""
    from ..prompt import template_for_model
    try:
        return template_for_model(target)
    except ValueError:
        return "plain"


def save_draft(folder: Path, draft, target: Path, template: str, meta: dict | None = None) -> None:
    """``folder``: the draft in bf16 with the target's tokenizer files and prompt template."""
    folder.mkdir(parents=True, exist_ok=True)
    draft.save_pretrained(folder, dtype=torch.bfloat16)
    for name in TOKENIZER_FILES:
        if (target / name).is_file():
            shutil.copy2(target / name, folder / name)
    cfg = json.loads((folder / "config.json").read_text())
    tcfg = json.loads((target / "config.json").read_text())
    cfg["completer_template"] = template
    cfg["completer_draft_for"] = tcfg.get("name") or str(target)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    eos = cfg.get("eos_token_id")
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "pad_token_id": eos}) + "\n")
    if meta is not None:
        (folder.parent / "train_meta.json").write_text(json.dumps(meta, indent=2) + "\n")


# --- acceptance against the real target (CPU is fine) -----------------------------------------------------------------

def plain_tasks(groups: dict[str, list[tuple[str, str, str]]], n: int, seed: int, prefix_chars: int = 1500):
    """Per language, ``n`` plain prompts: header + up to ``prefix_chars`` before a random line start (past line 5)."""
    rng = random.Random(seed)
    out: dict[str, list[str]] = {}
    for lang, files in sorted(groups.items()):
        files = [f for f in files if f[2].count("\n") >= 20]
        tasks = []
        while files and len(tasks) < n:
            path, language, text = rng.choice(files)
            starts = [i + 1 for i, c in enumerate(text) if c == "\n"][5:-2]
            if not starts:
                continue
            cut = rng.choice(starts)
            tasks.append(header(path, language) + text[max(0, cut - prefix_chars):cut])
        out[lang] = tasks
    return out


@torch.no_grad()
def acceptance(target_model, draft_model, tok, prompts: list[str], new_tokens: int = 32,
               positions: int = 8) -> dict:
    """Along the target's greedy continuation of each prompt: the share of tokens the draft's greedy choice equals
    (alpha of greedy speculation), and the chance that i drafted tokens in a row are all accepted, i = 1..positions
    (teacher-forced: exact for greedy speculation, since accepted tokens are the target's own)."""
    runs = []
    for p in prompts:
        ids = tok.encode(p, add_special_tokens=False).ids
        cache = target_model.new_cache(len(ids) + new_tokens + 1)
        logits = target_model(torch.tensor([ids]), cache, last_only=True)
        cont: list[int] = []
        for _ in range(new_tokens):
            nxt = int(logits[0, -1].argmax())
            cont.append(nxt)
            logits = target_model(torch.tensor([[nxt]]), cache)
        pred = draft_model(torch.tensor([ids + cont]))[0, len(ids) - 1:-1].argmax(-1).tolist()
        runs.append(np.array([a == b for a, b in zip(pred, cont)], dtype=bool))
    per, alpha = acceptance_by_position(runs, positions)
    return {"prompts": len(prompts), "acceptance_rate": alpha, "first_i_all_accepted": per,
            "expected_tokens_per_step_k2": 1 + sum(per[:2]) if runs else None,
            "expected_tokens_per_step_k4": 1 + sum(per[:4]) if runs else None}


def accept_main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m completer.training.draft_for accept",
                                 description="Acceptance of a draft against its real target on held-out code "
                                             "(plain prompts, greedy), per language; and both models' held-out "
                                             "cross-entropy.")
    ap.add_argument("--model", default="gguf:smollm2")
    ap.add_argument("--draft", nargs="+", default=["house:smollm2/draft"], help="one or more drafts, each "
                    "scored on the same prompts and text")
    ap.add_argument("--heldout", help="held-out archive (python -m completer.training.corpus build)")
    ap.add_argument("--local-python", action="store_true", help="also this machine's Python held-out split")
    ap.add_argument("--tasks", type=int, default=10, help="prompts per language")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--loss-mb", type=float, default=0.05, help="MB of held-out text per language for the loss")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    from ..models import resolve_model
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.time()
    tfolder = resolve_model(args.model)
    tok = load_tokenizer(tfolder)
    target = LlamaForCausalLM.from_pretrained(tfolder).eval()
    drafts = {d: LlamaForCausalLM.from_pretrained(resolve_model(d)).eval() for d in args.draft}
    groups = heldout_groups(args.heldout, args.local_python, 2.0)
    sep = separator_id(tok, tfolder)
    report = {"command": "python -m completer.training.draft_for accept " + " ".join(
        argv if argv is not None else __import__("sys").argv[2:]), "model": args.model,
        "params_target": sum(p.numel() for p in target.parameters()),
        "loss_target": heldout_ce(target, tok, sep, groups, torch.device("cpu"), seq_len=512, max_mb=args.loss_mb,
                                  batch=2), "drafts": {}}
    tasks = plain_tasks(groups, args.tasks, args.seed)
    for name, draft in drafts.items():
        ce_d = heldout_ce(draft, tok, sep, groups, torch.device("cpu"), seq_len=512, max_mb=args.loss_mb, batch=2)
        langs = {}
        for lang in sorted(groups):
            langs[lang] = {**acceptance(target, draft, tok, tasks.get(lang, []), args.new_tokens),
                           "loss_draft": ce_d.get(lang)}
            print(name, lang, json.dumps(langs[lang]), flush=True)
        runs = [v["acceptance_rate"] for v in langs.values() if v["acceptance_rate"] is not None]
        report["drafts"][name] = {"params_draft": sum(p.numel() for p in draft.parameters()), "languages": langs,
                                  "acceptance_rate_mean_over_languages": float(np.mean(runs)) if runs else None}
    report["seconds"] = time.time() - t0
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return 0


def subset_main(argv: list[str] | None = None) -> int:
    """A smaller corpus archive to carry to a device (a call carries the tree plus a few MiB): the first ``--mb``
    of text of ARCHIVE (its files are shuffled across languages), languages in ``--skip`` left out, at most
    ``--per-language-mb`` of each."""
    from . import corpus

    ap = argparse.ArgumentParser(prog="python -m completer.training.draft_for subset", description=subset_main.__doc__)
    ap.add_argument("archive")
    ap.add_argument("out")
    ap.add_argument("--mb", type=float, required=True, help="MB of text in all")
    ap.add_argument("--per-language-mb", type=float, help="MB of text per language at most")
    ap.add_argument("--skip", nargs="*", default=[], help="languages to leave out (e.g. python)")
    args = ap.parse_args(argv)
    take, size, per = [], 0, {}
    for path, lang, text in corpus.read_archive(args.archive):
        if lang in args.skip or (args.per_language_mb and per.get(lang, 0) >= args.per_language_mb * 1e6):
            continue
        take.append({"rel": path, "language": lang, "text": text})
        size += len(text)
        per[lang] = per.get(lang, 0) + len(text)
        if size >= args.mb * 1e6:
            break
    corpus.write_archive(take, args.out)
    print(json.dumps({"out": args.out, "files": len(take), "bytes": Path(args.out).stat().st_size,
                      "mb_by_language": {k: round(v / 1e6, 2) for k, v in sorted(per.items())}}))
    return 0


if __name__ == "__main__":
    import sys
    commands = {"accept": accept_main, "subset": subset_main}
    if sys.argv[1:2] and sys.argv[1] in commands:
        raise SystemExit(commands[sys.argv[1]](sys.argv[2:]))
    raise SystemExit("usage: python -m completer.training.draft_for accept [--model M --draft D --heldout ARCHIVE] | "
                     "subset ARCHIVE OUT --mb N [--skip LANG...]")
