import json

from completer.training import train


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


def test_ctrl_c_keeps_the_models_as_they_are_and_says_where(tmp_path, house):
    """SIGINT in the middle of training (a real Ctrl-C): the pair is saved as it is, the command says where, and
    exits 130. It used to throw everything away."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    out = tmp_path / "pair"
    proc = subprocess.Popen([sys.executable, "-m", "completer.training.train", "--preset", "tiny", "--tokenizer",
                             str(house / "target"), "--corpus-mb", "0.3", "--minutes", "10", "--out", str(out),
                             "--device", "cpu"], cwd=Path(__file__).resolve().parents[3],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a foreground command's Ctrl-C: SIGINT handled even when the test run itself was started
                            # in the background (where a shell leaves SIGINT ignored for its children)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = ""
        deadline = time.monotonic() + 240
        while "step 10 " not in seen:                    # the progress line after 10 steps (stderr, tqdm)
            assert proc.poll() is None and time.monotonic() < deadline, seen[-2000:]
            seen += proc.stderr.read1(4096) if hasattr(proc.stderr, "read1") else proc.stderr.readline()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stdout[-2000:] + stderr[-2000:]
    assert "ETA " in seen
    assert f"output folder: {out}" in stdout
    assert ("interrupted at step" in stdout and f"saved in {out / 'target'} and {out / 'draft'}" in stdout), stdout
    meta = json.loads((out / "train_meta.json").read_text())
    assert meta["interrupted"] is True and meta["steps"] >= 10
    for name in ("target", "draft"):
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (out / name).iterdir()}


def test_help_shows_the_defaults(capsys):
    import pytest

    with pytest.raises(SystemExit):
        train.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: cpu)" in text and "(default: runs/house)" in text and "(default: 1234)" in text
    assert "the preset's: cpu 30, h200 6, tiny 0.5" in text
    assert train._eta(30, 120, 10, None) == "1:30" and train._eta(30, 120, 10, 20) == "0:30"


def test_corpus_archive_checkpoints_and_parts(tmp_path, house):
    """--corpus trains on an archive (several languages), --checkpoint-minutes saves during training and --archive
    writes the folder as tar parts that restore to a loadable pair (how v2 came back from the device)."""
    import io
    import tarfile

    from completer.training import corpus
    from completer.models.llama import LlamaForCausalLM

    texts = [("a.go", "go", "package main\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n" * 40),
             ("b.rs", "rust", "fn main() {\n    let x = vec![1, 2, 3];\n    println!(\"{:?}\", x);\n}\n" * 40),
             ("c.h", "c", "#ifndef X_H\n#define X_H\nint f(int a, int b);\n#endif\n" * 40)]
    corpus.write_archive([{"rel": r, "language": lang, "text": t} for r, lang, t in texts], tmp_path / "c.jsonl.xz")
    out = tmp_path / "pair"
    rc = train.main(["--preset", "tiny", "--tokenizer", str(house / "target"), "--corpus", str(tmp_path / "c.jsonl.xz"),
                     "--max-steps", "40", "--minutes", "3", "--checkpoint-minutes", "0.001", "--out", str(out),
                     "--device", "cpu", "--archive", str(tmp_path / "back" / "pair.tar")])
    assert rc == 0
    meta = json.loads((out / "train_meta.json").read_text())
    assert meta["steps"] == 40 and meta["corpus"].endswith("c.jsonl.xz") and meta["train_files"] == 3
    assert meta["checkpoint"] is False and meta["loss_first_target"] - meta["final_loss_target"] > 0.3
    parts = sorted((tmp_path / "back").glob("pair.tar.part*"))
    assert parts and not list((tmp_path / "back").glob("*.tmp"))
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts))) as tar:
        tar.extractall(tmp_path / "restored")
    restored = tmp_path / "restored" / "pair"
    assert json.loads((restored / "train_meta.json").read_text())["steps"] == 40
    LlamaForCausalLM.from_pretrained(restored / "target")


def test_archive_parts_are_bounded_and_stale_parts_removed(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "big.bin").write_bytes(bytes(range(256)) * 40)
    dest = tmp_path / "out" / "x.tar"
    dest.parent.mkdir()
    (dest.parent / "x.tar.part9").write_bytes(b"old")
    (dest.parent / "x.tar.part3").write_bytes(b"old")
    parts = train.write_archive(folder, dest, part_bytes=4000)
    assert [p.name for p in parts] == [f"x.tar.part{i}" for i in range(len(parts))] and len(parts) >= 3
    assert all(p.stat().st_size <= 4000 for p in parts)
    assert sorted(dest.parent.iterdir()) == sorted(parts)          # stale parts of an earlier save are gone
