"""`nmt import argos FILE.argosmodel`: an Argos Translate package as an nmt checkpoint.

A package is a zip of one directory holding ``metadata.json`` (the languages), ``model/`` (a
CTranslate2 model: nmt.imports.from_ctranslate2 reads it) and ``sentencepiece.model``. The zip is read
safely: member names that would leave the folder, links and an uncompressed size over
``MAX_BYTES`` are refused; only those three parts are extracted (to a temporary folder)."""

from __future__ import annotations

import json
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from .from_ctranslate2 import import_ctranslate2
from .imported import ModelImportError, check_out_dir

MAX_BYTES = 8 << 30  # uncompressed: far above any Argos package (the largest are ~1 GiB)


def package_members(z: zipfile.ZipFile, path: Path) -> tuple[str, list[zipfile.ZipInfo]]:
    """The package's top directory and the members to extract (metadata, model/, sentencepiece)."""
    infos = z.infolist()
    if sum(i.file_size for i in infos) > MAX_BYTES:
        raise ModelImportError(f"{path}: uncompressed size over {MAX_BYTES >> 30} GiB; not an Argos package")
    tops = set()
    for info in infos:
        name = PurePosixPath(info.filename)
        if name.is_absolute() or ".." in name.parts or (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise ModelImportError(f"{path}: member {info.filename!r} leaves the package or is a link")
        tops.add(name.parts[0])
    if len(tops) != 1:
        raise ModelImportError(
            f"{path}: an Argos package is a zip of one directory (found {sorted(tops)[:3]})"
        )
    top = tops.pop()
    wanted = [
        i
        for i in infos
        if i.filename in (f"{top}/metadata.json", f"{top}/sentencepiece.model")
        or i.filename.startswith(f"{top}/model/")
    ]
    return top, wanted


def import_argos(package: str | Path, out_dir: str | Path, *, log=print) -> Path:
    """`nmt import argos`: the .argosmodel ``package`` as the nmt checkpoint ``out_dir`` (new or
    empty), its languages recorded (data.src_lang / data.tgt_lang) so that it exports back."""
    path = Path(package)
    out = check_out_dir(out_dir, path)
    if not path.is_file():
        raise ModelImportError(f"{path}: no such file")
    with tempfile.TemporaryDirectory(prefix=".argos-import-") as tmp:
        try:
            with zipfile.ZipFile(path) as z:
                top, members = package_members(z, path)
                for info in members:
                    z.extract(info, tmp)
        except (zipfile.BadZipFile, OSError, EOFError) as e:
            raise ModelImportError(f"{path}: not a readable zip file ({e})") from None
        root = Path(tmp) / top
        for part in ("metadata.json", "sentencepiece.model", "model/model.bin"):
            if not (root / part).is_file():
                raise ModelImportError(f"{path}: the package holds no {top}/{part}")
        try:
            meta = json.loads((root / "metadata.json").read_text(encoding="utf-8"))
            data = {"src_lang": str(meta["from_code"]), "tgt_lang": str(meta["to_code"])}
        except (ValueError, KeyError, TypeError) as e:
            raise ModelImportError(f"{path}: {top}/metadata.json has no from_code/to_code ({e})") from None
        return import_ctranslate2(
            root / "model", out, spm_model=root / "sentencepiece.model", data=data, log=log
        )
