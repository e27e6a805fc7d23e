"""One model for several target languages: the target-language tag.

Marian's and Hugging Face's convention (opus-mt multi-target models): the source sentence starts
with a token naming the target language, ``>>de<< A man sits.``; the tag is one SentencePiece
piece (a user-defined symbol of the shared vocabulary), so the model reads it as one token. `nmt
prepare` with several targets (``--tgt de,fr,cs``) tags each pair's source with its target and
concatenates the corpora (``merge_tagged``); translating, ``tagged`` puts the tag of the chosen
target in front of each sentence (an empty sentence stays empty).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..vocab import target_tag
from .download import DataError
from .lines import read_lines

MULTIPLE = "mul"  # ISO 639-2 "multiple languages": meta.json's tgt_lang of a multi-target corpus
LANG_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def target_langs(spec: str) -> list[str]:
    """'de,fr,cs' -> ['de', 'fr', 'cs']; DataError for an empty, repeated or malformed code."""
    langs = [s.strip() for s in spec.split(",")]
    for lang in langs:
        if not LANG_CODE.fullmatch(lang):
            raise DataError(f"--tgt {spec!r}: {lang!r} is not a language code (e.g. --tgt de,fr,cs)")
    if len(set(langs)) != len(langs):
        raise DataError(f"--tgt {spec!r}: a language given twice")
    return langs


def tagged(sentences: list[str], lang: str) -> list[str]:
    """Each non-empty sentence preceded by the tag of target ``lang`` (a space between)."""
    tag = target_tag(lang)
    return [f"{tag} {s}" if s.strip() else s for s in sentences]


def check_target(lang: str | None, data: dict) -> str | None:
    """The tag to put in front of the sentences for target ``lang`` with a model whose data (its
    checkpoint's meta.json) is ``data``: None for a model of one target (``lang`` None or that
    target); ValueError naming the targets for a language the model does not translate into, or
    for a multi-target model without a target. Where ``data`` names no language, ``lang``'s tag."""
    langs = data.get("tgt_langs")
    if not data.get("tgt_lang") and not langs:  # languages unknown (an export): the tag as asked
        return None if lang is None else target_tag(lang)
    if not langs:
        if lang is None or lang == data.get("tgt_lang"):
            return None
        raise ValueError(
            f"target language {lang!r}: this model translates into {data.get('tgt_lang')!r} only"
        )
    if lang is None:
        raise ValueError(f"this model translates into {', '.join(langs)}: choose one (target language)")
    if lang not in langs:
        raise ValueError(f"target language {lang!r}: this model translates into {', '.join(langs)}")
    return target_tag(lang)


def checkpoint_target_tag(path: str | Path, lang: str | None) -> str | None:
    """check_target for the checkpoint or run directory ``path`` (its config.json's data); for
    another model directory (a CTranslate2 export) the languages are unknown."""
    from ..checkpoint import CheckpointError, read_config, resolve_checkpoint

    try:
        data = read_config(resolve_checkpoint(path)).get("data") or {}
    except CheckpointError:  # no checkpoint here: an export (a checkpoint's own errors come on loading)
        data = {}
    return check_target(lang, data)


def merge_tagged(pairs: dict[str, dict[str, tuple[Path, Path]]], out: Path) -> dict[str, tuple[Path, Path]]:
    """``pairs``: target language -> split -> (source file, target file). Writes, per split, one
    source file of every pair's tagged source lines and one target file of their targets, in the
    order of ``pairs``, under ``out``; returns split -> (source, target). Every target must bring
    the same splits."""
    splits = list(next(iter(pairs.values())))
    for lang, files in pairs.items():
        if list(files) != splits:
            raise DataError(
                f"target {lang}: splits {', '.join(files)}; the first target has {', '.join(splits)}"
            )
    out.mkdir(parents=True, exist_ok=True)
    merged = {}
    for split in splits:
        src_out, tgt_out = out / f"{split}.src", out / f"{split}.tgt"
        with open(src_out, "w", encoding="utf-8") as fs, open(tgt_out, "w", encoding="utf-8") as ft:
            for lang, files in pairs.items():
                src_path, tgt_path = files[split]
                n_src = n_tgt = 0
                for n_src, line in enumerate(read_lines(src_path), start=1):
                    fs.write(tagged([line], lang)[0] + "\n")
                for n_tgt, line in enumerate(read_lines(tgt_path), start=1):
                    ft.write(line + "\n")
                if n_src != n_tgt:
                    raise DataError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}")
        merged[split] = (src_out, tgt_out)
    return merged
