"""The shared source-target BPE vocabulary of `nmt prepare` (section 5.1 of the paper): its default
size and character coverage, one SentencePiece model learned on the cleaned train text
(`train_spm`), or the model of an earlier `nmt prepare` or of a checkpoint reused id for id
(`reuse_spm`, with the checkpoint's target_spm.model where it has one: its target side's own)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..atomic import sha256_file
from ..vocab import BOS, EOS, PAD, SPM, TARGET_SPM, UNK, load_spm
from .download import DataError

CJK_LANGS = ("zh", "ja", "ko")  # rich character sets: SentencePiece coverage 0.9995
DEFAULT_VOCAB = {"multi30k": 8000, "wmt14": 37000}  # paper: ~37k shared BPE for WMT14 en-de
WMT14_EN_FR_VOCAB = 32000  # paper: "a 32000 word-piece vocabulary" for WMT14 en-fr


def default_vocab_size(dataset: str, n_train_pairs: int) -> int:
    if dataset in DEFAULT_VOCAB:
        return DEFAULT_VOCAB[dataset]
    return 8000 if n_train_pairs < 100_000 else 16000 if n_train_pairs < 1_000_000 else 32000


def is_cjk(lang: str) -> bool:
    """A language written in CJK characters (zh, zh-Hans, ja_JP ...): no spaces between words."""
    return lang.lower().split("-")[0].split("_")[0] in CJK_LANGS


def character_coverage(langs: tuple[str, ...]) -> float:
    return 0.9995 if any(is_cjk(lang) for lang in langs) else 1.0


def train_spm(inputs: list[Path], prefix: Path, *, seed: int, **kwargs):
    """Train SentencePiece on the lines of `inputs`; write {prefix}.model and {prefix}.vocab.

    Sentences are streamed from Python (sentencepiece keeps only its `input_sentence_size`
    sample), which also keeps our temporary paths out of the model: same data, same bytes.
    """
    import io

    import sentencepiece as spm

    def sentences() -> Iterator[str]:
        for path in inputs:
            with open(path, encoding="utf-8", newline="\n") as f:
                for line in f:
                    yield line[:-1]

    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(), model_writer=model, minloglevel=2, **kwargs
        )
    except RuntimeError as e:
        raise DataError(f"SentencePiece training failed: {e}") from e
    Path(f"{prefix}.model").write_bytes(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    with open(f"{prefix}.vocab", "w", encoding="utf-8", newline="\n") as f:  # piece<TAB>score
        for i in range(sp.get_piece_size()):
            f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n")
    return sp


def reuse_spm(path: Path, prefix: Path):
    """Copy the SentencePiece model ``path`` (a file, or a prepared DATA_DIR or checkpoint holding
    spm.model) to {prefix}.model / .vocab after checking its special ids are nmt's, and the target
    side's target_spm.model beside an spm.model to {prefix}'s folder (nmt.vocab.TARGET_SPM); returns
    the model, the target side's (None: none) and the "spm" record for meta.json (the source's, when
    its meta.json is beside it; the target model's sha256)."""
    import sentencepiece as spm

    model_file = path / SPM if path.is_dir() else path
    if not model_file.is_file():
        raise DataError(
            f"--spm-model {path}: no such file (give an spm.model or the DATA_DIR of an "
            "earlier `nmt prepare`)"
        )
    data = model_file.read_bytes()
    try:
        sp = spm.SentencePieceProcessor(model_proto=data)
    except RuntimeError as e:
        raise DataError(f"--spm-model {model_file}: not a SentencePiece model ({e})") from e
    ids = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    if ids != {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}:
        raise DataError(
            f"--spm-model {model_file}: special ids {ids}, nmt needs pad {PAD}, unk {UNK}, "
            f"bos {BOS}, eos {EOS} (use the spm.model of an `nmt prepare` DATA_DIR)"
        )
    Path(f"{prefix}.model").write_bytes(data)
    with open(f"{prefix}.vocab", "w", encoding="utf-8", newline="\n") as f:  # piece<TAB>score
        for i in range(sp.get_piece_size()):
            f.write(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n")
    record = _source_spm_record(model_file.parent / "meta.json")
    record = {**record, "reused_from": str(model_file), "sha256": sha256_file(model_file)}
    tgt_sp = _reuse_target(model_file, Path(prefix).parent) if model_file.name == SPM else None
    if tgt_sp is not None:
        record["target_sha256"] = sha256_file(model_file.parent / TARGET_SPM)
    return sp, tgt_sp, record


def _reuse_target(model_file: Path, folder: Path):
    """The target_spm.model beside ``model_file`` copied into ``folder`` and loaded (checked to hold
    its pieces, id for id); None where there is none."""
    if not (model_file.parent / TARGET_SPM).is_file():
        return None
    shutil.copyfile(model_file.parent / TARGET_SPM, folder / TARGET_SPM)
    try:
        return load_spm(model_file.parent, side="target")
    except ValueError as e:
        raise DataError(f"--spm-model {model_file.parent}: {e}") from None


def _source_spm_record(path: Path) -> dict:
    """The "spm" record of the `nmt prepare` meta.json at ``path``; for none, another tool's or a
    damaged one (it only describes the model, which is checked itself), no character coverage."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # none, unreadable, not UTF-8 or not JSON
        meta = None
    if (
        isinstance(meta, dict)
        and meta.get("format") == "nmt-prepared-data"
        and isinstance(meta.get("spm"), dict)
    ):
        return meta["spm"]
    return {"character_coverage": None}
