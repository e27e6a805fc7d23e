"""The one place for special token ids.

`nmt prepare` trains SentencePiece with exactly these ids and records them in ``meta.json``
(``special_ids``); everything else (the model's padding mask, ``collate``, the loss's
``ignore_index``, search, translation) imports them from here. A prepared corpus or a checkpoint
whose recorded ids differ is rejected by ``check_special_ids`` rather than silently misread.

The SentencePiece model holding these ids is ``spm.model`` in a prepared DATA_DIR and in every
checkpoint directory; ``load_spm`` is the one loader of it. A directory may also hold
``target_spm.model`` (``TARGET_SPM``): the target side's own segmentation on the same pieces, id for id
(an imported Marian model's target.spm); target text is then encoded with it (``load_spm(...,
side="target")``), and without it with ``spm.model``, one model for both sides.
"""

from __future__ import annotations

from pathlib import Path

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_IDS = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}
SPM = "spm.model"  # the SentencePiece model of a DATA_DIR or checkpoint (the source side's, or both sides')
TARGET_SPM = "target_spm.model"  # the target side's, where it segments otherwise (same pieces and ids)
SIDES = ("source", "target")


def target_tag(lang: str) -> str:
    """The target-language tag of a multi-target model's source sentences, one user-defined piece
    of its vocabulary (Marian's and Hugging Face's convention): 'de' -> '>>de<<' (nmt.data.multilingual)."""
    return f">>{lang}<<"


def check_special_ids(recorded: dict | None, source: str) -> None:
    """Raise ValueError naming ``source`` when recorded special ids differ from ``SPECIAL_IDS``
    (``None``: nothing recorded, accepted)."""
    if recorded is None:
        return
    try:
        same = {k: int(v) for k, v in recorded.items()} == SPECIAL_IDS
    except (AttributeError, TypeError, ValueError):  # not a mapping of integers
        same = False
    if not same:
        raise ValueError(
            f"{source}: special token ids {recorded} differ from nmt's {SPECIAL_IDS} "
            "(pad, unk, bos, eos); re-run `nmt prepare`"
        )


def load_spm(directory: str | Path, *, side: str = "source", source=None):
    """The SentencePiece processor of ``directory``'s ``spm.model`` (a prepared DATA_DIR or a
    checkpoint); ``side="target"``: of its ``target_spm.model`` where it has one (its pieces must be
    spm.model's, id for id), else of spm.model (``source``: spm.model's processor, loaded already:
    then that one). ValueError naming the file when it is missing, not a SentencePiece model or of
    other pieces (callers raise it as their own layer's error, as with ``check_special_ids``)."""
    if side not in SIDES:
        raise ValueError(f"side {side!r}: choose 'source' or 'target'")
    source = _processor(Path(directory) / SPM) if source is None or side == "source" else source
    target_file = Path(directory) / TARGET_SPM
    if side == "source" or not target_file.is_file():
        return source
    target = _processor(target_file)
    n = source.get_piece_size()
    if target.get_piece_size() != n or any(target.id_to_piece(i) != source.id_to_piece(i) for i in range(n)):
        raise ValueError(
            f"{target_file}: not the pieces of {Path(directory) / SPM}, id for id (the target side's "
            "model must be on the same vocabulary)"
        )
    return target


def _processor(path: Path):
    import sentencepiece as spm

    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise ValueError(f"{path}: not a readable SentencePiece model ({e})") from None
