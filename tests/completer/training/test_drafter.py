"""The EAGLE-3 drafter: its unrolled training pass computes what vLLM's draft loop computes step by step, and its
checkpoint has the names and config keys vLLM 0.26's ``llama_eagle3.py`` loads."""

import json

import pytest
import torch
import torch.nn.functional as F

from completer.training.drafter import DrafterConfig, Eagle3Drafter, apply_rope, target_features
from completer.models.llama import LlamaForCausalLM, ModelConfig


def tiny(seed=0):
    torch.manual_seed(seed)
    t = LlamaForCausalLM(ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    t.init_weights(seed)
    d = Eagle3Drafter(DrafterConfig.for_target(t.config))
    with torch.no_grad():
        for p in d.parameters():
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if p.dim() == 1 else 0.0))
    return t.eval(), d.eval()


def reference_chain(d, embed, tokens, feats, p, steps):
    """vLLM's loop for one verification ending at index p: a first pass over positions 0..p (target-derived
    hidden states, causal), then one query per step at position p + j over the cache of all earlier entries."""
    c = d.config
    m, a = d.midlayer, d.midlayer.self_attn

    def qkv(emb, hid, pos):
        x = torch.cat([m.input_layernorm(emb), m.hidden_norm(hid)], -1)
        T = x.shape[0]
        q = a.q_proj(x).view(T, c.num_attention_heads, c.head_dim).transpose(0, 1)
        k = a.k_proj(x).view(T, c.num_key_value_heads, c.head_dim).transpose(0, 1)
        v = a.v_proj(x).view(T, c.num_key_value_heads, c.head_dim).transpose(0, 1)
        cos, sin = d.rope_cos[pos], d.rope_sin[pos]
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def finish(hid, y):
        res = hid + a.o_proj(y)
        res = res + m.mlp(m.post_attention_layernorm(res))
        return d.lm_head(d.norm(res)), res

    rep = c.num_attention_heads // c.num_key_value_heads
    hid0 = d.fc(feats[0, : p + 1])
    emb0 = embed(tokens[0, 1: p + 2])
    q, K, V = qkv(emb0, hid0, torch.arange(p + 1))
    y = F.scaled_dot_product_attention(q, K.repeat_interleave(rep, 0), V.repeat_interleave(rep, 0), is_causal=True)
    logits, res = finish(hid0, y.transpose(0, 1).reshape(p + 1, -1))
    out, hid = [logits[p]], res[p: p + 1]
    for j in range(1, steps):
        q, k, v = qkv(embed(tokens[0, p + j + 1: p + j + 2]), hid, torch.tensor([p + j]))
        K, V = torch.cat([K, k], 1), torch.cat([V, v], 1)
        y = F.scaled_dot_product_attention(q, K.repeat_interleave(rep, 0), V.repeat_interleave(rep, 0))
        logits, hid = finish(hid, y.transpose(0, 1).reshape(1, -1))
        out.append(logits[0])
    return out


@torch.no_grad()
def test_unrolled_training_pass_equals_the_step_by_step_draft_loop():
    t, d = tiny()
    tokens = torch.randint(0, 64, (1, 20), generator=torch.Generator().manual_seed(1))
    feats, _ = target_features(t, tokens, d.config.aux_layer_ids)
    outs = d.unrolled(t.model.embed_tokens, tokens, feats, 4)
    for p in (0, 5, 13):
        ref = reference_chain(d, t.model.embed_tokens, tokens, feats, p, 4)
        for j in range(4):
            torch.testing.assert_close(outs[j][0, p], ref[j], atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_target_features_are_the_residual_stream_and_the_logits_are_the_models():
    t, d = tiny()
    tokens = torch.randint(0, 64, (2, 12))
    feats, logits = target_features(t, tokens, [0, 2, 4])
    torch.testing.assert_close(logits, t(tokens), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(feats[..., :32], t.model.embed_tokens(tokens))      # id 0 = the embeddings


def test_checkpoint_has_vllms_names_and_config_keys(tmp_path):
    t, d = tiny()
    d.save(tmp_path, {"note": "test"})
    from safetensors import safe_open

    names = set(safe_open(str(tmp_path / "model.safetensors"), "pt").keys())
    expected = {"fc.weight", "norm.weight", "lm_head.weight"} | {
        f"midlayer.{n}.weight" for n in ("input_layernorm", "hidden_norm", "post_attention_layernorm",
                                         "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                         "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")}
    # embed_tokens absent: vLLM shares the target's; d2t/t2d absent with the target's own vocabulary (vLLM 0.32
    # refuses them there)
    assert d.config.draft_vocab_size == d.config.vocab_size and names == expected
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    assert cfg["eagle_aux_hidden_state_layer_ids"] == d.config.aux_layer_ids == [2, 3, 4]
    assert cfg["target_hidden_size"] == cfg["hidden_size"] == 32
    with torch.no_grad():
        again = Eagle3Drafter.load(tmp_path)
        tokens = torch.randint(0, 64, (1, 10))
        feats, _ = target_features(t, tokens, d.config.aux_layer_ids)
        a = d.unrolled(t.model.embed_tokens, tokens, feats, 2)[1]
        b = again.unrolled(t.model.embed_tokens, tokens, feats, 2)[1]
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9     # bf16 checkpoint, same drafts


def test_a_smaller_draft_vocabulary_maps_back_to_target_ids():
    t, _ = tiny()
    d = Eagle3Drafter(DrafterConfig.for_target(t.config, draft_vocab_size=4))
    d.set_vocab(torch.tensor([9, 0, 63, 5]))
    assert d.draft_ids().tolist() == [0, 5, 9, 63]
    assert d.t2d.nonzero().flatten().tolist() == [0, 5, 9, 63]


def test_a_smaller_draft_vocabulary_keeps_its_map_in_the_checkpoint(tmp_path):
    t, _ = tiny()
    d = Eagle3Drafter(DrafterConfig.for_target(t.config, draft_vocab_size=4))
    d.set_vocab(torch.tensor([9, 0, 63, 5]))
    d.save(tmp_path)
    from safetensors import safe_open

    assert {"d2t", "t2d"} <= set(safe_open(str(tmp_path / "model.safetensors"), "pt").keys())
    assert Eagle3Drafter.load(tmp_path).draft_ids().tolist() == [0, 5, 9, 63]


def test_train_drafter_command_for_a_users_qwen2_target(tmp_path):
    """`completer train-drafter --target FOLDER` on a (tiny, random) Qwen2 checkpoint of one's own: trains, writes
    the drafter vLLM loads and a held-out acceptance report with one entry per draft position."""
    from completer.cli import main
    from tests.helpers.tiny_models import random_lm, save, train_tokenizer

    train_tokenizer(tmp_path / "tok")
    target = random_lm(3, 12.0, vocab_size=400, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                       max_position_embeddings=512, eos_token_id=0, model_type="qwen2", attention_bias=True)
    save(target, tmp_path / "target", tmp_path / "tok")
    assert json.loads((tmp_path / "target" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    out = tmp_path / "eagle3"
    assert main(["train-drafter", "--target", str(tmp_path / "target"), "--out", str(out), "--device", "cpu",
                 "--max-steps", "2", "--batch", "2", "--seq-len", "64", "--corpus-mb", "0.05", "--steps-ahead", "3",
                 "--eval-prompts", "2", "--eval-tokens", "6"]) == 0
    meta = json.loads((out / "train_meta.json").read_text())
    assert meta["steps"] == 2 and meta["config"]["aux_layer_ids"] == [1, 2, 3]
    report = meta["heldout"]
    assert len(report["acceptance_per_position"]) == 8 and report["drafted_per_position"][0] > 0
    assert all(a <= d for a, d in zip(report["accepted_per_position"], report["drafted_per_position"]))
    assert json.loads((out / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]


def test_train_drafter_on_a_corpus_archive_for_the_packed_house_v2_target(tmp_path):
    """house v2's drafter: the int4-packed target folder (dequantised as the vLLM backend is given it), a corpus
    archive of several languages (--corpus, read as `completer train --corpus` reads it), no report during training
    (--eval-prompts 0, as on the device), then --report-only on a held-out archive: one report per language."""
    from completer.cli import main
    from completer.models import HOUSE_DIR, resolve_model
    from completer.training import corpus
    from completer.models.llama import LlamaForCausalLM

    src = {"go": "package main\n\nfunc add(a, b int) int {\n\treturn a + b\n}\n\n",
           "rust": "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n",
           "c": "static int add(int a, int b) {\n    return a + b;\n}\n\n"}
    corpus.write_archive([{"rel": f"{lang}{i}", "language": lang, "text": text * (20 + i)}
                          for lang, text in src.items() for i in range(3)], tmp_path / "train.jsonl.xz")
    corpus.write_archive([{"rel": f"h-{lang}{i}", "language": lang, "text": text * 30} for lang, text in src.items()
                          if lang != "c" for i in range(12)], tmp_path / "heldout.jsonl.xz")
    target = HOUSE_DIR / "v2" / "target"
    assert (target / "model.quant").is_file() and not (target / "model.safetensors").exists()
    out = tmp_path / "eagle3"
    common = ["--target", str(target), "--out", str(out), "--device", "cpu", "--eval-tokens", "4"]
    assert main(["train-drafter", *common, "--corpus", str(tmp_path / "train.jsonl.xz"), "--max-steps", "3",
                 "--batch", "2", "--seq-len", "64", "--steps-ahead", "2", "--eval-prompts", "0"]) == 0
    meta = json.loads((out / "train_meta.json").read_text())
    assert meta["steps"] == 3 and meta["train_files"] == 9 and meta["corpus"] == [str(tmp_path / "train.jsonl.xz")]
    assert meta["target_folder"] == str(resolve_model("house:v2/target")) and "heldout" not in meta
    # the hidden states it trained on are those of the dequantised weights (what vLLM loads), not of anything else
    loaded = LlamaForCausalLM.from_pretrained(meta["target_folder"])
    from completer.models import quant
    torch.testing.assert_close(loaded.model.layers[0].self_attn.q_proj.weight,
                               quant.dequantised_state(target)["model.layers.0.self_attn.q_proj.weight"].float())

    assert main(["train-drafter", *common, "--report-only", "--heldout", str(tmp_path / "heldout.jsonl.xz"),
                 "--eval-prompts", "2"]) == 0
    report = json.loads((out / "train_meta.json").read_text())["heldout"]
    assert sorted(report["by_language"]) == ["go", "rust"] and report["prompts"] == 4
    for j in range(8):
        assert report["drafted_per_position"][j] == sum(r["drafted_per_position"][j]
                                                        for r in report["by_language"].values())
    assert report["drafted_per_position"][0] > 0


def test_train_drafter_refuses_a_missing_archive_before_loading_anything(tmp_path):
    from completer.cli import main

    with pytest.raises(SystemExit, match="no corpus archive"):
        main(["train-drafter", "--target", "house:v2/target", "--out", str(tmp_path / "d"),
              "--corpus", str(tmp_path / "nope.jsonl.xz")])


def test_heldout_prompts_stay_a_list_of_token_ids_for_tune():
    """`completer tune` samples its prompts with heldout_prompts: a list of token-id lists (the per-language
    grouping of the drafter's report is heldout_prompts_by_language)."""
    from completer.models import HOUSE_DIR
    from completer.training.drafter import heldout_prompts, heldout_prompts_by_language
    from completer.models.tokenizer import load_tokenizer

    tok = load_tokenizer(HOUSE_DIR / "v2" / "target")
    prompts = heldout_prompts(tok, 3, seed=1234, max_len=900)
    assert len(prompts) == 3 and all(isinstance(t, int) for p in prompts for t in p)
    assert heldout_prompts_by_language(tok, 3, 1234, 900) == {"python-local": prompts}
