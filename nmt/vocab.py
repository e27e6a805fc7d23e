"""The one place for special token ids.

`nmt prepare` trains SentencePiece with exactly these ids and records them in ``meta.json``
(``special_ids``); everything else (the model's padding mask, ``collate``, the loss's
``ignore_index``, search, translation) imports them from here. A prepared corpus or a checkpoint
whose recorded ids differ is rejected by ``check_special_ids`` rather than silently misread.

The SentencePiece model holding these ids is ``spm.model`` in a prepared DATA_DIR and in every
checkpoint directory; ``load_spm`` is the one loader of it.
"""

from __future__ import annotations

from pathlib import Path

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_IDS = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}


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


def load_spm(directory: str | Path):
    """The SentencePiece processor of ``directory``'s ``spm.model`` (a prepared DATA_DIR or a
    checkpoint); ValueError naming the file when it is missing or not a SentencePiece model (callers
    raise it as their own layer's error, as with ``check_special_ids``)."""
    import sentencepiece as spm

    path = Path(directory) / "spm.model"
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise ValueError(f"{path}: not a readable SentencePiece model ({e})") from None
