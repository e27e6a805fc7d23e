"""The checkpoint an import writes (nmt/imports/imported.py): OUT_DIR checked before any work, the
checkpoint written atomically with its SentencePiece models."""

from __future__ import annotations

import pytest

from nmt.imports.imported import ModelImportError, check_out_dir, write_checkpoint


def test_out_dir_must_be_new_or_empty(tmp_path):
    assert check_out_dir(tmp_path / "new", "src") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    check_out_dir(tmp_path / "empty", "src")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep")
    with pytest.raises(ModelImportError, match="exists and is not empty"):
        check_out_dir(tmp_path / "full", "src")
    with pytest.raises(ModelImportError, match="is the model being imported"):
        check_out_dir(tmp_path / "src", tmp_path / "src")


def test_checkpoint_holds_both_sentencepiece_models(tiny_checkpoint, tmp_path):
    from nmt.checkpoint import load_model, read_config, verify

    model, _ = load_model(tiny_checkpoint)
    spm = (tiny_checkpoint / "spm.model").read_bytes()
    (tmp_path / "out").mkdir()  # an empty directory is replaced
    out = write_checkpoint(
        tmp_path / "out", model, spm_bytes=spm, target_spm_bytes=spm + b"", record={"format": "x"}, data={}
    )
    assert "target_spm.model" not in verify(out)  # the same model once
    out2 = write_checkpoint(
        tmp_path / "out2", model, spm_bytes=spm, target_spm_bytes=spm + b"x", record={}, data={}
    )
    assert "target_spm.model" in verify(out2) and read_config(out)["imported"] == {"format": "x"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out2"]  # no temporaries left
