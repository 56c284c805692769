"""The shipped house pair is where the package looks for it, and it is what the end-to-end and editor tests run.

An earlier helper computed the house folder relative to its own file, one level too high (outside the repository),
found nothing, and quietly fell back to a tiny random pair: the end-to-end tests never ran the shipped models
their docstrings promised. These tests fail (they do not skip) when the pair cannot be found.
"""

from __future__ import annotations

from completer.models import HOUSE_DIR, resolve_model
from tests.helpers import tiny_models


def test_house_pair_is_shipped_inside_the_package():
    assert tiny_models.house_missing() == [], "the shipped house pair is incomplete"
    import completer

    assert HOUSE_DIR.resolve().is_relative_to(next(iter(completer.__path__)))
    for name in tiny_models.HOUSE_NAMES:
        assert resolve_model(f"house:{name}") == HOUSE_DIR / name


def test_end_to_end_and_editor_tests_run_the_house_pair(house_options):
    """They run the shipped house pair (house v2 since issue 12): vLLM's default model and the embedded engine's
    where SmolLM2 is not installed (issue 29)."""
    from completer.engine import EngineConfig

    assert (house_options["model"], house_options["draft"]) == ("house:v2/target", "house:v2/draft")
    vllm = EngineConfig(backend="vllm")
    assert (house_options["model"], house_options["draft"]) == (vllm.model, vllm.draft)
    for spec in (house_options["model"], house_options["draft"]):
        assert (resolve_model(spec) / "model.safetensors").is_file()


def test_house_v2_is_shipped_packed_and_loads_as_a_pair(tmp_path, monkeypatch):
    """house:v2 ships int4/int8-packed (small enough for the device's 64 MiB per call next to a vLLM bundle part)
    and resolves to an ordinary folder; target and draft share one tokenizer, the house template, and agree on
    the greedy next token most of the time (the draft was distilled from the target)."""
    import torch

    from completer.models.llama import LlamaForCausalLM
    from completer.models.tokenizer import load_tokenizer
    from completer.prompt import fim_prompt, template_for_model

    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path))
    v2 = HOUSE_DIR / "v2"
    pair = [p for p in v2.rglob("*") if p.is_file() and "eagle3" not in p.relative_to(v2).parts]
    assert sum(p.stat().st_size for p in pair) < 9.5e6
    # its EAGLE-3 drafter (vLLM only) ships beside it in bf16, as vLLM loads it
    assert sum(p.stat().st_size for p in (v2 / "eagle3").iterdir()) < 8.5e6
    target, draft = resolve_model("house:v2/target"), resolve_model("house:v2/draft")
    assert target.is_relative_to(tmp_path) and draft.is_relative_to(tmp_path)
    assert (target / "tokenizer.json").read_bytes() == (draft / "tokenizer.json").read_bytes()
    assert template_for_model(target) == template_for_model(draft) == "house"
    tok = load_tokenizer(target)
    prompt = fim_prompt("package main\n\nfunc main() {\n\tfmt.Println(", ")\n}\n", "house")
    ids = torch.tensor([tok.encode(prompt).ids])
    t, d = LlamaForCausalLM.from_pretrained(target), LlamaForCausalLM.from_pretrained(draft)
    assert t.config.vocab_size == d.config.vocab_size == tok.get_vocab_size()
    with torch.no_grad():
        lt, ld = t(ids)[0], d(ids)[0]
    agree = (lt.argmax(-1) == ld.argmax(-1)).float().mean().item()
    assert agree > 0.4, agree


def test_each_house_target_ships_the_eagle3_drafter_trained_on_it(tmp_path, monkeypatch):
    """HOUSE_DRAFTERS names, for each house target, a drafter trained on that target's hidden states: it predicts the
    target's next tokens along the target's own greedy continuation of code (first draft position), far better than
    the other house target's drafter does on it (same shapes, so vLLM would load either)."""
    from completer.engine.config import HOUSE_DRAFTERS
    from completer.training.drafter import Eagle3Drafter, acceptance_report
    from completer.models.llama import LlamaForCausalLM
    from completer.models.tokenizer import load_tokenizer
    from completer.prompt import fim_prompt

    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path))
    assert HOUSE_DRAFTERS == {"house:target": "house:eagle3", "house:v2/target": "house:v2/eagle3"}
    code = [("def mean(values):\n    total = 0\n    for v in values:\n        ", "\n    return total / len(values)\n"),
            ("func sum(xs []int) int {\n\ts := 0\n\tfor _, x := range xs {\n\t\t", "\n\t}\n\treturn s\n}\n")]
    first = {}
    for target_name, drafter_name in HOUSE_DRAFTERS.items():
        target = LlamaForCausalLM.from_pretrained(resolve_model(target_name)).eval()
        tok = load_tokenizer(resolve_model(target_name))
        prompts = [tok.encode(fim_prompt(p, s, "house")).ids for p, s in code]
        for other in HOUSE_DRAFTERS.values():
            drafter = Eagle3Drafter.load(resolve_model(other))
            report = acceptance_report(drafter, target, prompts, 16, None, "cpu", k_max=1)
            first[target_name, other] = report["acceptance_per_position"][0]
    for target_name, own in HOUSE_DRAFTERS.items():
        other = next(d for d in HOUSE_DRAFTERS.values() if d != own)
        assert first[target_name, own] > 0.3, first
        assert first[target_name, own] > first[target_name, other] + 0.15, first
