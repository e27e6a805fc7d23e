"""`nmt tune-alpha` (nmt/infer/tune_command.py): the length penalty chosen on a development set
(section 6.1)."""

from __future__ import annotations

import json

import pytest
from translate_fixtures import LengthTranslator, make_checkpoint

from nmt.infer.tune import tune_alpha
from nmt.infer.tune_command import parse_alphas


def test_cli_on_a_checkpoint_and_an_ensemble(tmp_path, capsys):
    from nmt.cli import main

    ckpt = make_checkpoint(tmp_path / "m")
    src = tmp_path / "valid.src"
    src.write_text("der hund laeuft.\ndie katze springt auf den baum.\nein rot haus.\n", encoding="utf-8")
    ref = tmp_path / "valid.ref"
    # references: the model's own beam-4 output at alpha 1.4, so that alpha scores 100
    assert (
        main(
            [
                "translate",
                str(ckpt),
                "-i",
                str(src),
                "-o",
                str(ref),
                "--beam",
                "4",
                "--alpha",
                "1.4",
                "--quiet",
                "--no-guards",
                "--precision",
                "fp32",
                "--max-len-a",
                "0",
                "--max-len-b",
                "8",
            ]
        )
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "alpha.json"
    # the same checkpoint twice is an ensemble equal to the model (averaged log-probabilities)
    assert (
        main(
            [
                "tune-alpha",
                str(ckpt),
                str(ckpt),
                "--src",
                str(src),
                "--ref",
                str(ref),
                "--alphas",
                "0,1.4",
                "--precision",
                "fp32",
                "--max-len-a",
                "0",
                "--max-len-b",
                "8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out.splitlines()
    result = json.loads(out.read_text())
    assert printed[-1] == f"best alpha: {result['best_alpha']:g}"
    assert [r["alpha"] for r in result["rows"]] == [0.0, 1.4] and len(printed) == 6  # title, header, 2 rows
    by_alpha = {r["alpha"]: r for r in result["rows"]}
    assert by_alpha[1.4]["bleu"] == pytest.approx(100)
    assert result["best_alpha"] == 1.4 or by_alpha[0.0]["bleu"] == pytest.approx(100)
    assert (
        main(
            [
                "tune-alpha",
                str(ckpt),
                "--src",
                str(src),
                "--ref",
                str(ref),
                "--precision",
                "fp16",
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    assert "--precision fp16 on cpu" in capsys.readouterr().err
    # a missing reference file is a one-line error that names it
    assert main(["tune-alpha", str(ckpt), "--src", str(src), "--ref", str(tmp_path / "nope")]) == 2
    assert "nope" in capsys.readouterr().err


def test_an_empty_development_set_is_a_clear_error(tmp_path, capsys):
    """No lines in --src and --ref: one line naming the file (was: 'internal error: IndexError'
    from sacreBLEU after the model was loaded)."""
    from nmt.cli import main
    from nmt.infer.translate import TranslateError

    with pytest.raises(TranslateError, match="no development sentences"):
        tune_alpha(LengthTranslator([]), [], [])
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    ckpt = make_checkpoint(tmp_path / "m")
    assert (
        main(["tune-alpha", str(ckpt), "--src", str(empty), "--ref", str(empty), "--precision", "fp32"]) == 2
    )
    assert capsys.readouterr().err == f"nmt tune-alpha: error: --src {empty}: no development sentences\n"


def test_tune_alpha_refuses_the_numbers_translate_refuses(tmp_path, capsys):
    """An infinite alpha, a negative --max-len-a/-b or --batch-tokens 0 are one line each (were:
    a table of empty outputs or alpha inf, and 'best alpha' chosen from it)."""
    import argparse

    from nmt.cli import main

    for bad in ("inf", "0.6,inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_alphas(bad)
    src = tmp_path / "s.txt"
    src.write_text("der hund.\n", encoding="utf-8")
    base = ["tune-alpha", str(tmp_path / "missing"), "--src", str(src), "--ref", str(src)]
    for args, err in (
        (["--max-len-b", "-3"], "--max-len-a 1.0 --max-len-b -3: must be >= 0"),
        (["--max-len-a", "-1"], "--max-len-a -1.0 --max-len-b 50: must be >= 0"),
        (["--max-len-a", "inf"], "--max-len-a inf: must be a finite number"),
        (["--batch-tokens", "0"], "--batch-tokens 0: must be positive"),
    ):
        assert main([*base, *args]) == 2
        assert capsys.readouterr().err == f"nmt tune-alpha: error: {err}\n"
