from completer.models import corpus


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
