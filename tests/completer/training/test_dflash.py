"""The DFlash drafter: its batched training/evaluation pass computes, for every block, what vLLM's DFlash
proposer computes for that block alone (context keys from the target's features, the block bidirectional), and its
checkpoint has exactly the names, shapes and config keys vLLM 0.26's ``qwen3_dflash.py`` loads."""

import json

import pytest
import torch
import torch.nn.functional as F

from completer.training.dflash import (DFlashConfig, DFlashDrafter, acceptance_report, block_mask, blocks,
                                     check_checkpoint, dflash_loss, draft_all, expected_weights)
from completer.training.drafter import target_features
from completer.models.llama import LlamaForCausalLM, ModelConfig, apply_rope


def tiny(seed=0, causal=False, block=4):
    torch.manual_seed(seed)
    t = LlamaForCausalLM(ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))
    t.init_weights(seed)
    d = DFlashDrafter(DFlashConfig.for_target(t.config, mask_token_id=3, layers=2, block_size=block, causal=causal))
    with torch.no_grad():
        for p in d.parameters():
            p.copy_(torch.randn_like(p) * 0.2 + (1.0 if p.dim() == 1 else 0.0))
    return t.eval(), d.eval()


def reference_block(d, t, seq, P, k):
    """vLLM's proposer for one verification: context K/V of positions 0..P-1 from the target's features
    (hidden_norm(fc(.)), k_norm, RoPE; no input norm), then the decoder over [seq[P], M*k] at positions P..P+k
    attending to the context and to the whole block; argmax of offsets 1..k through the target's embedding."""
    c = d.config
    feats, _ = target_features(t, seq[None, :P], c.aux_layer_ids)
    ctx = d.hidden_norm(d.fc(feats[0]))                                         # [P, H]
    ids = torch.tensor([int(seq[P])] + [c.mask_token_id] * k)
    pos = torch.arange(P, P + k + 1)
    h = F.embedding(ids, t.model.embed_tokens.weight)
    rep = c.num_attention_heads // c.num_key_value_heads

    def heads(x, proj, n):
        return proj(x).view(x.shape[0], n, c.head_dim).transpose(0, 1)

    for layer in d.layers:
        a = layer.self_attn
        kc = apply_rope(a.k_norm(heads(ctx, a.k_proj, c.num_key_value_heads)), d.rope_cos[:P], d.rope_sin[:P])
        vc = heads(ctx, a.v_proj, c.num_key_value_heads)
        x = layer.input_layernorm(h)
        q = apply_rope(a.q_norm(heads(x, a.q_proj, c.num_attention_heads)), d.rope_cos[pos], d.rope_sin[pos])
        kq = apply_rope(a.k_norm(heads(x, a.k_proj, c.num_key_value_heads)), d.rope_cos[pos], d.rope_sin[pos])
        vq = heads(x, a.v_proj, c.num_key_value_heads)
        K, V = torch.cat([kc, kq], 1).repeat_interleave(rep, 0), torch.cat([vc, vq], 1).repeat_interleave(rep, 0)
        mask = None
        if c.causal:
            mask = torch.cat([torch.ones(k + 1, P, dtype=torch.bool), torch.ones(k + 1, k + 1).tril().bool()], 1)
        y = F.scaled_dot_product_attention(q, K, V, attn_mask=mask)
        h = h + a.o_proj(y.transpose(0, 1).reshape(k + 1, -1))
        h = h + layer.mlp(layer.post_attention_layernorm(h))
    return F.linear(d.norm(h), t.model.embed_tokens.weight)[1:].argmax(-1)


@pytest.mark.parametrize("causal", [False, True])
def test_all_blocks_in_one_pass_equal_each_block_alone(causal):
    t, d = tiny(causal=causal)
    seq = torch.randint(6, 64, (20,))
    with torch.no_grad():
        batched = draft_all(d, t, seq, start=8, k=3)
        alone = torch.stack([reference_block(d, t, seq, P, 3) for P in range(8, 19)])
    assert torch.equal(batched, alone)


def test_block_ids_positions_and_mask():
    seq = torch.tensor([10, 11, 12, 13, 14, 15])
    ids, pos = blocks(seq, torch.tensor([2, 4]), 3, mask_id=3)
    assert ids.tolist() == [12, 3, 3, 14, 3, 3] and pos.tolist() == [2, 3, 4, 4, 5, 6]
    m = block_mask(torch.tensor([2, 4]), 6, 3)
    assert m.shape == (6, 12)
    assert m[0, :6].tolist() == [True, True, False, False, False, False]     # context strictly before P
    assert m[3, :6].tolist() == [True, True, True, True, False, False]
    assert m[0, 6:].tolist() == [True, True, True, False, False, False]       # its own block, both ways
    mc = block_mask(torch.tensor([2, 4]), 6, 3, causal=True)
    assert mc[0, 6:].tolist() == [True, False, False, False, False, False]


def test_checkpoint_has_what_vllms_dflash_loader_fills(tmp_path):
    t, d = tiny()
    d.save(tmp_path / "df", {"note": "test"})
    cfg = json.loads((tmp_path / "df" / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and "eagle_config" not in cfg
    assert cfg["dflash_config"] == {"mask_token_id": 3, "target_layer_ids": d.config.target_layer_ids}
    assert cfg["rope_parameters"]["rope_theta"] == cfg["rope_theta"] and cfg["head_dim"] == 8
    from safetensors.torch import load_file

    state = load_file(str(tmp_path / "df" / "model.safetensors"))
    assert {k: tuple(v.shape) for k, v in state.items()} == expected_weights(d.config)
    assert all(v.dtype == torch.bfloat16 for v in state.values())
    assert not any(k.startswith(("model.", "embed_tokens", "lm_head")) for k in state)   # the target's are shared
    back = DFlashDrafter.load(tmp_path / "df")
    assert back.config == d.config
    with pytest.raises(ValueError, match="missing"):
        check_checkpoint(d.config, {k: v for k, v in expected_weights(d.config).items() if "q_norm" not in k})


def test_config_refuses_what_vllm_would_misread():
    t, _ = tiny()
    with pytest.raises(ValueError, match="0..3"):
        DFlashConfig.for_target(t.config, mask_token_id=3, target_layer_ids=[1, 4])   # a 4-layer target: ids 0..3
    with pytest.raises(ValueError, match="vocabulary"):
        DFlashConfig.for_target(t.config, mask_token_id=64)
    with pytest.raises(ValueError, match="not a DFlash"):
        DFlashConfig.from_hf({"architectures": ["LlamaForCausalLMEagle3"]})


def test_training_fits_the_targets_greedy_continuation_and_the_report_counts_it():
    """A few hundred steps on one greedy continuation: the drafts of that continuation become right, and the
    acceptance report (vLLM's count) sees it; before training they are at chance."""
    t, d = tiny(seed=1)
    from completer.training.drafter import greedy_continuation

    prompt = torch.randint(6, 64, (12,)).tolist()
    seq = torch.tensor(prompt + greedy_continuation(t, prompt, 24, None, "cpu"))
    before = acceptance_report(d, t, [prompt], 24, None, "cpu", k=3)["acceptance_per_position"][0]
    d.train()
    opt = torch.optim.Adam(d.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        loss, agree = dflash_loss(d, t, [(seq, len(prompt))], 16, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    d.eval()
    after = acceptance_report(d, t, [prompt], 24, None, "cpu", k=3)
    assert before < 0.3 and after["acceptance_per_position"][0] > 0.8
    assert after["expected_tokens_per_step"]["3"] > 2.5


@pytest.mark.parametrize("data", ["text", "continuations"])
def test_train_drafter_method_dflash_for_the_packed_house_v2_target(tmp_path, data):
    """`completer train-drafter --method dflash`: windows of a corpus archive (or the target's greedy
    continuations of FIM prompts from it), a few steps, the checkpoint vLLM's DFlash loader takes (mask token
    <|fim_pad|>), then the held-out report per draft position of the trained block."""
    from completer.cli import main
    from completer.training import corpus

    src = {"go": "package main\n\nfunc add(a, b int) int {\n\treturn a + b\n}\n\n",
           "rust": "fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\n"}
    corpus.write_archive([{"rel": f"{lang}{i}", "language": lang, "text": text * (4 + i)}
                          for lang, text in src.items() for i in range(12)], tmp_path / "train.jsonl.xz")
    out = tmp_path / "dflash"
    assert main(["train-drafter", "--method", "dflash", "--target", "house:v2/target", "--out", str(out),
                 "--device", "cpu", "--corpus", str(tmp_path / "train.jsonl.xz"), "--dflash-data", data,
                 "--sequences", "3", "--gen-tokens", "8", "--seq-len", "64", "--max-steps", "2", "--batch", "2",
                 "--anchors", "4", "--block", "4", "--eval-prompts", "2", "--eval-tokens", "6"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["DFlashDraftModel"] and cfg["dflash_config"]["mask_token_id"] == 4
    assert cfg["dflash_config"]["target_layer_ids"] == [1, 3, 7] and cfg["hidden_size"] == 320
    meta = json.loads((out / "train_meta.json").read_text())
    assert meta["method"] == "dflash" and meta["steps"] == 2 and meta["data"] == data and meta["init"] == "last"
    if data == "continuations":
        assert meta["sequences"] == 3 and meta["gen_tokens"] == 8
    else:                                  # every 64-token window of the corpus's FIM samples
        assert meta["seq_len"] == 64 and meta["train_tokens"] == 64 * meta["sequences"] > 1000
    report = meta["heldout"]
    assert len(report["acceptance_per_position"]) == 3 and report["drafted_per_position"][0] > 0
    assert all(a <= d for a, d in zip(report["accepted_per_position"], report["drafted_per_position"]))
    assert DFlashDrafter.load(out).config.block_size == 4


def test_batched_greedy_continuations_equal_the_one_by_one_ones():
    """On a GPU train-drafter continues prompts in batches of neighbouring lengths (trimmed after their first
    token): each continuation is the one the cached one-by-one generation gives for the trimmed prompt."""
    from completer.training.dflash import greedy_batch, length_buckets
    from completer.training.drafter import greedy_continuation

    t, _ = tiny(seed=2)
    prompts = [torch.randint(6, 64, (n,)).tolist() for n in (9, 12, 10, 15, 11)]
    groups = length_buckets(prompts, 2)
    assert [len(g) for g in groups] == [2, 2, 1] and all(len({len(p) for p in g}) == 1 for g in groups)
    assert groups[0][1][0] == sorted(prompts, key=len)[1][0]           # the first (FIM) token is kept
    assert groups[0][1][1:] == sorted(prompts, key=len)[1][-(len(groups[0][0]) - 1):]
    for group in groups:
        for p, cont in zip(group, greedy_batch(t, group, 12, eos=7)):
            assert cont == greedy_continuation(t, p, 12, 7, "cpu")


@pytest.mark.parametrize("causal", [False, True])
def test_a_batch_of_sequences_in_one_forward_equals_each_sequence_alone(causal):
    """Training takes several sequences of different lengths in one forward (right-padded): every block's logits
    are those of its sequence alone, so the padding and the other sequences are never seen."""
    from completer.training.dflash import batch_block_logits, block_logits

    t, d = tiny(seed=4, causal=causal)
    seqs = [torch.randint(6, 64, (n,)) for n in (20, 31, 26)]
    anchors = torch.tensor([[3, 15, 15], [28, 0, 9], [24, 12, 5]])
    with torch.no_grad():
        logits, labels = batch_block_logits(d, t, seqs, anchors, 4)
        alone = [block_logits(d, t, s, a, 4) for s, a in zip(seqs, anchors)]
    assert torch.allclose(logits, torch.cat([x for x, _ in alone]), atol=1e-5)
    assert torch.equal(labels, torch.cat([y for _, y in alone]))


def test_labels_are_the_targets_own_chain_from_each_anchor():
    """Offset i of the block at P is labelled with the target's token at P+i only while the sequence between is
    what the target would have generated (its chain from P); never past the sequence's real end."""
    from completer.training.dflash import chain_labels

    pred = torch.tensor([[10, 11, 12, 13, 14, 15, 16, 17]] * 2)       # the target's argmax after each position
    ids = torch.tensor([[0, 10, 11, 99, 13, 14, 15, 16]] * 2)           # position 3 leaves the target's chain
    got = chain_labels(ids, pred, torch.tensor([8, 7]), torch.tensor([[0, 2, 6], [5, 0, 2]]), 4)
    assert got[0].view(3, 4).tolist() == [[-100, 10, 11, 12], [-100, 12, -100, -100], [-100, 16, 17, -100]]
    assert got[1].view(3, 4).tolist() == [[-100, 15, 16, -100], [-100, 10, 11, 12], [-100, 12, -100, -100]]


@pytest.mark.parametrize("which,src", [("first", [0, 1]), ("last", [2, 3])])
def test_drafter_layers_can_start_as_the_targets(which, src):
    """``--dflash-init first|last``: each drafter layer is a copy of a target layer (projections, MLP, norms), the
    final norm is the target's; the Qwen3 q/k norms the target lacks are left as they were."""
    from completer.training.dflash import init_from_target

    t, d = tiny()
    qn = d.layers[0].self_attn.q_norm.weight.clone()
    assert init_from_target(d, t, which) == src
    for dl, i in zip(d.layers, src):
        tl = t.model.layers[i]
        for name in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj", "input_layernorm"):
            assert torch.equal(dl.get_submodule(name).weight, tl.get_submodule(name).weight)
    assert torch.equal(d.norm.weight, t.model.norm.weight)
    assert torch.equal(d.layers[0].self_attn.q_norm.weight, qn)
    with pytest.raises(ValueError, match="init must be"):
        init_from_target(d, t, "middle")
