"""`nmt import argos` (nmt/imports/from_argos.py): nmt's own Argos packages come back with identical weights
and their languages; a zip that would write outside its folder is refused, nothing written."""

from __future__ import annotations

import zipfile

import pytest
import torch

from nmt.checkpoint import load_state, read_config
from nmt.cli import main
from nmt.imports.from_argos import import_argos

pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")


def test_argos_package_round_trips(tiny_checkpoint, tmp_path):
    package = tmp_path / "en_de.argosmodel"
    assert main(["export", "argos", str(tiny_checkpoint), str(package), "--languages", "en-de"]) == 0
    import_argos(package, tmp_path / "back")
    a, b = load_state(tiny_checkpoint), load_state(tmp_path / "back")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    config = read_config(tmp_path / "back")
    assert (
        config["data"] == {"src_lang": "en", "tgt_lang": "de"}
        and config["imported"]["format"] == "ctranslate2"
    )
    # and it exports again (the languages recorded)
    assert main(["export", "argos", str(tmp_path / "back"), str(tmp_path / "again.argosmodel")]) == 0


@pytest.mark.parametrize("member", ["../evil.txt", "/abs.txt", "pkg/../../evil.txt"])
def test_package_leaving_its_folder_is_refused(tmp_path, capsys, member):
    package = tmp_path / "bad.argosmodel"
    with zipfile.ZipFile(package, "w") as z:
        z.writestr("pkg/metadata.json", "{}")
        z.writestr(member, "x")
    assert main(["import", "argos", str(package), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "leaves the package or is a link" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil.txt").exists()


def test_package_without_a_model_is_refused(tmp_path, capsys):
    package = tmp_path / "empty.argosmodel"
    with zipfile.ZipFile(package, "w") as z:
        z.writestr("pkg/metadata.json", '{"from_code": "en", "to_code": "de"}')
    assert main(["import", "argos", str(package), str(tmp_path / "out")]) == 2
    assert "the package holds no pkg/sentencepiece.model" in capsys.readouterr().err
