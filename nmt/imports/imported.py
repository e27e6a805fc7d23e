"""An imported model written as an nmt checkpoint: the error every importer raises, the check of the
output directory before any work, and the checkpoint itself (nmt.checkpoint.save: safetensors and
JSON, written atomically: a failed import leaves nothing behind).

The checkpoint is a plain nmt checkpoint: ``model.safetensors``, ``config.json`` (its ``model``
section; ``data`` records the languages where the original names them; ``imported`` what it was
imported from), ``spm.model`` (nmt.imports.vocabulary's joint model, the source side's) and, where the
original's target SentencePiece model differs from its source one, ``target_spm.model`` (the same ids;
nmt.vocab.TARGET_SPM: what encodes target text, and what `nmt export huggingface` writes as target.spm)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from ..errors import UserError


class ModelImportError(UserError):
    """A model that cannot be imported (a missing or malformed file, an unsupported architecture);
    the message names the file."""


def check_out_dir(out_dir: str | Path, source: str | Path) -> Path:
    """OUT_DIR as a Path, refused before any work when it exists and is not an empty directory, or
    is the source itself."""
    out = Path(out_dir)
    if out.resolve() == Path(source).resolve():
        raise ModelImportError(f"OUT_DIR {out}: is the model being imported; choose a new directory")
    if out.exists() or out.is_symlink():
        if not out.is_dir() or any(out.iterdir()):
            raise ModelImportError(f"OUT_DIR {out}: exists and is not empty; choose a new directory")
    return out


def write_checkpoint(
    out_dir: Path, model, *, spm_bytes: bytes, target_spm_bytes: bytes | None, record: dict, data: dict
) -> Path:
    """Save ``model`` (an nmt Transformer) with its SentencePiece model(s) as a checkpoint at
    ``out_dir`` (an empty directory left there is replaced)."""
    from .. import checkpoint as ckpt
    from ..vocab import SPM, TARGET_SPM

    config = {"model": dataclasses.asdict(model.cfg), "train": {}, "data": data, "imported": record}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out_dir.name}.spm-", dir=out_dir.parent) as tmp:
        spm_path = Path(tmp) / SPM
        spm_path.write_bytes(spm_bytes)
        if target_spm_bytes is not None and target_spm_bytes != spm_bytes:
            (Path(tmp) / TARGET_SPM).write_bytes(target_spm_bytes)  # saved beside spm.model
        if out_dir.is_dir() and not any(out_dir.iterdir()):
            out_dir.rmdir()
        return ckpt.save(out_dir, model=model, config=config, spm_model=spm_path)
