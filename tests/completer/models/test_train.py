import json

from completer.models import train


def test_tiny_run_lowers_loss_and_writes_loadable_pair(tmp_path, house):
    out = tmp_path / "pair"
    rc = train.main(["--preset", "tiny", "--tokenizer", str(house / "target"), "--corpus-mb", "0.3",
                     "--max-steps", "30", "--minutes", "3", "--out", str(out), "--device", "cpu"])
    assert rc == 0
    meta = json.loads((out / "train_meta.json").read_text())
    assert meta["steps"] == 30
    assert meta["loss_first_target"] - meta["final_loss_target"] > 0.3
    for name in ("target", "draft"):
        assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
            p.name for p in (out / name).iterdir()}
