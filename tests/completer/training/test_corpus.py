from completer.training import corpus


def test_split_is_stable_hash_of_relpath():
    # fixed expectations: the split must not depend on the machine, process or Python version
    assert corpus.is_heldout("asyncio/base_events.py") == corpus.is_heldout("asyncio/base_events.py")
    names = [f"pkg{i}/mod{i}.py" for i in range(4000)]
    share = sum(map(corpus.is_heldout, names)) / len(names)
    assert 0.03 < share < 0.07


def test_splits_disjoint_and_deterministic():
    train = list(corpus.iter_files("train"))
    held = list(corpus.iter_files("heldout"))
    assert held and train
    assert not {r for r, _ in train} & {r for r, _ in held}
    assert all(corpus.is_heldout(r) for r, _ in held)
    assert held == list(corpus.iter_files("heldout"))


def test_read_source_skips_bad_files(tmp_path):
    (tmp_path / "tiny.py").write_text("x = 1\n")
    (tmp_path / "latin.py").write_bytes(b"# caf\xe9\n" * 100)
    (tmp_path / "big.py").write_text("x = 1\n" * 60000)
    (tmp_path / "ok.py").write_text("def f():\n    return 1\n" * 20)
    assert corpus.read_source(tmp_path / "tiny.py") is None
    assert corpus.read_source(tmp_path / "latin.py") is None
    assert corpus.read_source(tmp_path / "big.py") is None
    assert corpus.read_source(tmp_path / "ok.py").startswith("def f")


def test_relpath_is_taken_below_the_innermost_package_dir(tmp_path):
    root = tmp_path / "lib" / "python3.12"
    assert corpus.relative_path(root / "site-packages" / "attr" / "_cmp.py", root) == "attr/_cmp.py"
    assert corpus.relative_path(root / "asyncio" / "events.py", root) == "asyncio/events.py"
    assert corpus.relative_path(root / "dist-packages" / "a" / "site-packages.py", root) == "a/site-packages.py"


def test_heldout_content_never_occurs_in_train():
    import hashlib

    train = {hashlib.sha1(p.read_bytes()).hexdigest() for _, p in corpus.iter_files("train")}
    assert not [r for r, p in corpus.iter_files("heldout") if hashlib.sha1(p.read_bytes()).hexdigest() in train]


# --- the v2 corpus (several languages, from a manifest, carried as an archive) ----------------------------------------
def _named(held: bool, folder, stem: str, ext: str = ".go") -> str:
    """A file name in ``folder`` whose relpath (its absolute path without the leading /) is (or is not) held out."""
    for i in range(5000):
        name = f"{stem}{i}{ext}"
        if corpus.is_heldout(str((folder / name).resolve()).lstrip("/")) == held:
            return name
    raise AssertionError("no such name")


def _source(root, **kw) -> dict:
    return {"name": "go", "language": "go", "apt": [], "roots": [str(root)], "ext": [".go"], "skip": ["testdata"],
            "max_mb": 10, **kw}


def test_v2_split_keeps_eval_files_heldout_files_and_their_copies_out_of_train(tmp_path, monkeypatch):
    import json

    eval_file = tmp_path / "eval" / "client.go"
    eval_file.parent.mkdir()
    eval_file.write_text("package main\n\nfunc evalOnly() int {\n\treturn 42\n}\n" * 10)
    (tmp_path / "quality_manifest.json").write_text(json.dumps({"files": [
        {"language": "go", "root": "abs", "path": str(eval_file).lstrip("/"), "source": "t", "sha1": "0" * 40}]}))
    monkeypatch.setattr(corpus, "QUALITY_MANIFEST", tmp_path / "quality_manifest.json")
    src = tmp_path / "src"
    (src / "testdata").mkdir(parents=True)
    body = lambda k: f"package p{k}\n\nfunc F{k}() int {{\n\treturn {k}\n}}\n" * 10  # noqa: E731
    train_names = [_named(False, src, f"a{k}_") for k in range(4)]
    for k, name in enumerate(train_names):
        (src / name).write_text(body(k))
    (src / _named(True, src, "h")).write_text(body(100))
    (src / _named(True, src, "alone")).write_text(body(101))
    (src / _named(False, src, "copy_of_held")).write_text(body(100))          # vendored copy of a held-out file
    (src / _named(False, src, "copy_of_eval")).write_text(eval_file.read_text())   # ... of an eval file
    (src / "testdata" / _named(False, src / "testdata", "skipped")).write_text(body(200))
    (src / _named(False, src, "minified")).write_text("var x = [" + "1," * 400 + "]\n")
    (src / "notes.txt").write_text(body(300))
    train, heldout, report = corpus.split_sources({"held_out_percent": 5, "max_line_chars": 400,
                                                   "sources": [_source(src)]}, heldout_mb=1.0)
    texts = {f["text"] for f in train}
    assert texts == {body(k) for k in range(4)}
    # held out: only the file with no copy at a train path (the other may have been trained on by v1, so neither
    # split keeps it)
    assert [f["text"] for f in heldout] == [body(101)]
    assert report["excluded_eval_files"] == 1 and report["excluded_heldout_twins"] == 1
    assert {f["rel"] for f in train} == {str((src / n).resolve()).lstrip("/") for n in train_names}


def test_v2_split_caps_each_source_by_hash_order_not_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "QUALITY_MANIFEST", tmp_path / "none.json")
    src = tmp_path / "src"
    src.mkdir()
    names = [_named(False, src, f"f{k}_") for k in range(40)]
    for k, n in enumerate(names):
        (src / n).write_text(f"package p\n// {k}\n" + "func f() {}\n" * 80)
    train, _, report = corpus.split_sources({"sources": [_source(src, max_mb=0.01)]}, heldout_mb=1.0)
    assert 5 <= len(train) < 40 and report["sources"]["go"]["train_files"] == len(train)
    taken = sorted(f["rel"] for f in train)
    assert taken != sorted(str((src / n).resolve()).lstrip("/") for n in sorted(names))[:len(train)]
    again, _, _ = corpus.split_sources({"sources": [_source(src, max_mb=0.01)]}, heldout_mb=1.0)
    assert [f["rel"] for f in again] == [f["rel"] for f in train]


def test_v2_archive_round_trips(tmp_path):
    files = [{"rel": "a/b.rs", "language": "rust", "text": "fn main() {\n    println!(\"é\");\n}\n"},
             {"rel": "c.h", "language": "c", "text": "#define X 1\n"}]
    corpus.write_archive(files, tmp_path / "x.jsonl.xz")
    assert list(corpus.read_archive(tmp_path / "x.jsonl.xz")) == [(f["rel"], f["language"], f["text"]) for f in files]
    assert list(corpus.read_archive(tmp_path / "x.jsonl.xz", max_bytes=5)) == [("a/b.rs", "rust", files[0]["text"])]


def test_v2_manifest_excludes_the_real_quality_eval_files_by_content(tmp_path):
    """A vendored copy of one of bench/quality's eval files (zlib.h, when this machine has it) never reaches train."""
    import hashlib

    import pytest

    paths, digests = corpus.quality_eval_files()
    if not paths:
        pytest.skip("none of bench/quality_manifest.json's files is on this machine")
    eval_path = sorted(paths)[0]
    copy = tmp_path / "vendored" / ("x" + eval_path.suffix)
    copy.parent.mkdir()
    copy.write_bytes(eval_path.read_bytes())
    assert hashlib.sha1(copy.read_bytes()).hexdigest() in digests
    src = {"name": "x", "language": "c", "apt": [], "roots": [str(copy.parent)], "ext": [eval_path.suffix],
           "skip": [], "max_mb": 10}
    train, _, report = corpus.split_sources({"max_line_chars": 100000, "sources": [src]}, heldout_mb=1.0)
    assert train == [] and report["excluded_eval_files"] == 1


def test_committed_manifest_is_well_formed():
    m = corpus.load_manifest()
    assert m["held_out_percent"] == corpus.HELDOUT_PERCENT
    langs = {s["language"] for s in m["sources"]}
    assert {"python", "c", "javascript", "typescript", "go", "rust"} <= langs
    for s in m["sources"]:
        assert s["roots"] and s["ext"] and s["max_mb"] > 0 and isinstance(s["apt"], list)


def test_subset_keeps_every_languages_share_in_archive_order(tmp_path):
    """The drafter's small device archive: each language keeps its share of the text, taken from its first files."""
    files = ([{"rel": f"p{i}.py", "language": "python", "text": "x = 1\n" * 10_000} for i in range(30)] +
             [{"rel": f"g{i}.go", "language": "go", "text": "var x = 1\n" * 10_000} for i in range(10)])
    corpus.write_archive(files, tmp_path / "all.jsonl.xz")
    total = sum(len(f["text"]) for f in files)
    report = corpus.subset_archive(tmp_path / "all.jsonl.xz", tmp_path / "small.jsonl.xz", total / 2 / 1e6)
    got = list(corpus.read_archive(tmp_path / "small.jsonl.xz"))
    assert [r for r, _, _ in got] == [f"p{i}.py" for i in range(15)] + [f"g{i}.go" for i in range(5)]
    assert report["files"] == 20 and report["mb_by_language"] == {"go": 0.5, "python": 0.9}
    assert report["archive_bytes"] == (tmp_path / "small.jsonl.xz").stat().st_size


def test_command_line_help_and_errors(capsys):
    """``--help`` prints the usage (it used to be read as a split name and crash); a wrong split is refused."""
    import pytest

    from completer.training import corpus
    with pytest.raises(SystemExit) as e:
        corpus.main(["--help"])
    assert e.value.code == 0 and "build" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        corpus.main(["count", "nonsense"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
