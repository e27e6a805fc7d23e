"""`nmt import` (nmt/imports/command.py): its arguments, and a missing source as one error line."""

from __future__ import annotations

from nmt.cli import main


def test_options_of_another_format_are_refused(tmp_path, capsys):
    assert main(["import", "huggingface", str(tmp_path), str(tmp_path / "out"), "--source-eos", "yes"]) == 2
    assert "--spm-model and --source-eos apply to ctranslate2 imports only" in capsys.readouterr().err


def test_ctranslate2_options_reach_the_import(tiny_checkpoint, tmp_path):
    import pytest

    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    from nmt.checkpoint import read_config

    assert main(["export", "ctranslate2", str(tiny_checkpoint), str(tmp_path / "ct2")]) == 0
    (tmp_path / "ct2" / "spm.model").rename(tmp_path / "elsewhere.model")
    argv = ["import", "ctranslate2", str(tmp_path / "ct2"), str(tmp_path / "out"), "--source-eos", "no"]
    assert main([*argv, "--spm-model", str(tmp_path / "elsewhere.model")]) == 0
    assert read_config(tmp_path / "out")["model"]["source_eos"] is False


def test_missing_sources_are_one_error_line(tmp_path, capsys):
    for fmt, source, message in (
        ("huggingface", tmp_path / "none", "no such directory"),
        ("ctranslate2", tmp_path, "model.bin: missing"),
        ("argos", tmp_path / "x.argosmodel", "no such file"),
    ):
        assert main(["import", fmt, str(source), str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()
