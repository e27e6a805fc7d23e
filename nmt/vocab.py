"""The one place for special token ids (issue 10, defect 3).

`nmt prepare` trains SentencePiece with exactly these ids and records them in ``meta.json``
(``special_ids``); everything else (the model's padding mask, ``collate``, the loss's
``ignore_index``, search, translation) imports them from here. A prepared corpus or a checkpoint
whose recorded ids differ is rejected by ``check_special_ids`` rather than silently misread.
"""

from __future__ import annotations

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_IDS = {"pad": PAD, "unk": UNK, "bos": BOS, "eos": EOS}


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
