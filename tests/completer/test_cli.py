"""`completer complete` end to end (in-process main(), tiny pair) and its position/usage errors."""

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
