"""`nmt export argos`: an nmt checkpoint as an Argos Translate package (``.argosmodel``), the format
LibreTranslate runs.

The package is a zip of one directory, ``translate-SRC_TGT-VERSION/``, holding what
``argostranslate.package.Package`` reads: ``metadata.json`` (languages, versions), ``model/`` (the
CTranslate2 export of nmt.export.ctranslate2, which argostranslate loads with
``ctranslate2.Translator``), ``sentencepiece.model`` (the checkpoint's ``spm.model``: argostranslate
encodes each sentence into pieces with it and decodes the pieces it gets back) and a ``README.md``.
It holds no sentence splitter: argostranslate 1.11 splits a paragraph into sentences with MiniSBD,
whose model for the source language it fetches once on first use (LibreTranslate does so when it
installs its models).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..languages import language_name
from .ctranslate2 import ExportError, export_ctranslate2

ARGOS_VERSION = "1.9"  # the package format argostranslate 1.9 to 1.11 read

README = """# {src}->{tgt} ({src_name} to {tgt_name}), exported from nmt

An Argos Translate package written by `nmt export argos` from the nmt checkpoint {source}
(CTranslate2 model, quantization {quantization}; SentencePiece model `sentencepiece.model`).

    import argostranslate.package, argostranslate.translate
    argostranslate.package.install_from_path("{name}.argosmodel")
    argostranslate.translate.translate("...", "{src}", "{tgt}")

LibreTranslate: copy the installed directory `{name}` into its packages directory
(`~/.local/share/argos-translate/packages`, or `$ARGOS_PACKAGES_DIR`) and start it with
`--load-only {src},{tgt}`.
"""


def package_name(src: str, tgt: str, version: str) -> str:
    """Argos's directory name: 'translate-en_de-1_0'."""
    return f"translate-{src}_{tgt}-{version.replace('.', '_')}"


def checkpoint_languages(source: Path, given: tuple[str, str] | None = None) -> tuple[str, str]:
    """The source and target language: ``given``, else the checkpoint's data's (ExportError when
    it has none, or for a model of several target languages)."""
    from ..checkpoint import read_config

    data = read_config(source).get("data") or {}
    if data.get("tgt_langs"):
        raise ExportError(
            f"{source}: a model of several target languages ({', '.join(data['tgt_langs'])}): an Argos "
            "package has no source-side target tag; serve it with nmt serve (its LibreTranslate API)"
        )
    src, tgt = given or (data.get("src_lang"), data.get("tgt_lang"))
    if not src or not tgt:
        raise ExportError(
            f"{source}: the checkpoint records no languages (data.src_lang / data.tgt_lang); "
            "give them with --languages SRC-TGT"
        )
    return src, tgt


def metadata(src: str, tgt: str, version: str) -> dict:
    return {
        "package_version": version,
        "argos_version": ARGOS_VERSION,
        "type": "translate",
        "from_code": src,
        "from_name": language_name(src),
        "to_code": tgt,
        "to_name": language_name(tgt),
        "links": [],
    }


def earlier_export(path: Path) -> bool:
    """Whether the file ``path`` is a package `nmt export argos` wrote: a zip of one directory whose
    model/ holds the CTranslate2 export's nmt_export.json."""
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False
    return any(n.count("/") == 2 and n.endswith("/model/nmt_export.json") for n in names)


def check_out_file(out_file: Path) -> None:
    """ExportError unless ``out_file`` may be written: a .argosmodel name, new or an earlier nmt
    export (then replaced, as the directory exports replace theirs); never another file, such as
    a package of the Argos index, which would be lost."""
    if out_file.suffix != ".argosmodel":
        raise ExportError(f"{out_file}: an Argos Translate package is a .argosmodel file")
    if out_file.is_dir():
        raise ExportError(f"{out_file}: is a directory; give the package's file name")
    if (out_file.exists() or out_file.is_symlink()) and not earlier_export(out_file):
        raise ExportError(f"{out_file}: exists and is not an nmt export; choose a new file name")


def export_argos(
    checkpoint: str | Path,
    out_file: str | Path,
    *,
    quantization: str | None = None,
    version: str = "1.0",
    languages: tuple[str, str] | None = None,
) -> Path:
    """Write ``out_file`` (.argosmodel: new, or an earlier nmt export) for the checkpoint, atomically
    (a temporary sibling renamed over it). ``languages``: (source, target) codes, by default the
    checkpoint's data's."""
    from ..checkpoint import resolve_checkpoint

    out_file = Path(out_file)
    check_out_file(out_file)
    source = resolve_checkpoint(checkpoint)
    src, tgt = checkpoint_languages(source, languages)
    name = package_name(src, tgt, version)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".argos-", dir=out_file.parent) as tmp:
        root = Path(tmp) / name
        root.mkdir()
        # argostranslate searches the full vocabulary: no vocabulary map in its package
        export_ctranslate2(source, root / "model", quantization=quantization, own_shortlist=False)
        shutil.copyfile(source / "spm.model", root / "sentencepiece.model")
        (root / "metadata.json").write_text(json.dumps(metadata(src, tgt, version), indent=2) + "\n")
        (root / "README.md").write_text(
            README.format(
                src=src,
                tgt=tgt,
                src_name=language_name(src),
                tgt_name=language_name(tgt),
                source=source,
                quantization=quantization or "none (float32)",
                name=name,
            )
        )
        partial = Path(tmp) / "package.zip"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
            for path in sorted(root.rglob("*")):
                z.write(path, path.relative_to(tmp))
        os.replace(partial, out_file)
    return out_file
