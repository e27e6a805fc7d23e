"""An imported model's vocabulary as nmt's: the special tokens at nmt's ids (nmt.vocab: PAD 0, UNK 1,
BOS 2, EOS 3), every other token after them in its original order, and one SentencePiece model
(``spm.model``) whose ids are those.

``VocabularyMap`` says which original row each nmt id takes (``order``): the embedding rows, the
output rows and the output bias are permuted by it, and every other layer is untouched. Marian
starts the decoder with its padding token, so nmt's BOS takes the padding row and nmt's PAD, which
then has no row of its own, gets a new row: zero, with a fixed output logit of ``PAD_LOGIT`` (a
probability of ~e^-100: the softmax's normaliser is the original's). A model without a padding token
or whose decoder starts from a zero vector (CTranslate2's Marian conversions) gets such rows for PAD
and BOS.

``joint_spm`` rewrites a SentencePiece model (its normaliser, pieces and scores kept) onto that id
space: a piece of the joint vocabulary the model has keeps its type and score, one it lacks (a
target-only piece in the source model) becomes UNUSED, which SentencePiece never produces when
encoding but decodes as its text. Encoding then gives the pieces the original model gives, looked up
in the joint vocabulary as MarianTokenizer and CTranslate2 look them up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UserError
from ..vocab import BOS, EOS, PAD, UNK

SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # nmt's pieces for PAD, UNK, BOS, EOS (nmt prepare's)
PAD_LOGIT = -100.0  # the output bias of a PAD that has no row of its own: never chosen, ~0 probability
TARGET_TAG = re.compile(r"^>>[^<>\s]+<<$")  # Marian's target-language tokens (>>de<<), one piece each


class VocabularyError(UserError):
    """A vocabulary that does not fit the model or its SentencePiece model; names the file."""


@dataclass(frozen=True)
class VocabularyMap:
    """nmt id i holds original token ``order[i]`` (None: a new row: zero, never chosen);
    ``pieces[i]`` is nmt's piece for it."""

    order: list[int | None]
    pieces: list[str]

    @property
    def new_rows(self) -> int:
        return sum(i is None for i in self.order)


def special_ids(
    pieces: list[str], *, pad: int | None, unk: int, eos: int, start: int | None, source: str
) -> VocabularyMap:
    """The VocabularyMap of an original vocabulary ``pieces`` (in its id order) with its padding
    ``pad``, ``unk``, ``eos`` and decoder start ``start`` ids (None: none; the decoder starts from
    a zero vector). A start equal to the padding (Marian) becomes nmt's BOS, and PAD a new row."""
    n = len(pieces)
    for name, i in (("pad", pad), ("unk", unk), ("eos", eos), ("decoder start", start)):
        if (i is not None or name in ("unk", "eos")) and not (isinstance(i, int) and 0 <= i < n):
            raise VocabularyError(f"{source}: {name} id {i} outside the vocabulary of {n} tokens")
    if len({unk, eos, start}) < 3:
        raise VocabularyError(f"{source}: unk {unk}, eos {eos} and decoder start {start} must differ")
    order: list[int | None] = [None if pad == start else pad, unk, start, eos]
    taken = {i for i in order if i is not None}
    order += [i for i in range(n) if i not in taken and i != pad]
    out = list(SPECIAL_PIECES) + [pieces[i] for i in order[4:]]
    clash = sorted(set(out[4:]) & set(SPECIAL_PIECES))
    if clash or len(set(out)) != len(out):
        dup = clash[0] if clash else next(p for p in out if out.count(p) > 1)
        raise VocabularyError(f"{source}: the piece {dup!r} appears twice (or as an ordinary token)")
    return VocabularyMap(order, out)


def joint_spm(model_bytes: bytes, pieces: list[str], *, source: str) -> tuple[bytes, int]:
    """The SentencePiece model ``model_bytes`` rewritten onto the joint vocabulary ``pieces`` (nmt's
    ids, specials first); returns (the model's bytes, how many of its own pieces the vocabulary
    lacks: words the original would have sent through those pieces may be segmented otherwise)."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    proto = pb.ModelProto()
    try:
        proto.ParseFromString(model_bytes)
    except Exception as e:  # google.protobuf.message.DecodeError
        raise VocabularyError(f"{source}: not a SentencePiece model ({e})") from None
    if not proto.pieces:
        raise VocabularyError(f"{source}: not a SentencePiece model (no pieces)")
    kind = pb.ModelProto.SentencePiece
    own = {p.piece: p for p in proto.pieces if p.type in (kind.NORMAL, kind.USER_DEFINED, kind.BYTE)}
    out = pb.ModelProto()
    out.CopyFrom(proto)
    del out.pieces[:]
    special_types = (kind.CONTROL, kind.UNKNOWN, kind.CONTROL, kind.CONTROL)
    for i, piece in enumerate(pieces):
        new = out.pieces.add()
        new.piece = piece
        if i < 4:
            new.type, new.score = special_types[i], 0.0
        elif piece in own:
            new.type, new.score = own[piece].type, own[piece].score
        elif TARGET_TAG.match(piece):  # a target tag: encoded whole, as MarianTokenizer splits it off
            new.type, new.score = kind.USER_DEFINED, 0.0
        else:
            new.type, new.score = kind.UNUSED, 0.0
    spec = out.trainer_spec
    spec.pad_id, spec.unk_id, spec.bos_id, spec.eos_id = PAD, UNK, BOS, EOS
    spec.pad_piece, spec.unk_piece, spec.bos_piece, spec.eos_piece = SPECIAL_PIECES
    spec.vocab_size = len(pieces)
    missing = len(set(own) - set(pieces))
    return out.SerializeToString(), missing


def load_processor(model_bytes: bytes, *, source: str):
    """A SentencePieceProcessor of ``model_bytes``; VocabularyError naming ``source`` otherwise."""
    import sentencepiece as spm

    try:
        return spm.SentencePieceProcessor(model_proto=model_bytes)
    except (RuntimeError, OSError, TypeError) as e:
        raise VocabularyError(f"{source}: not a readable SentencePiece model ({e})") from None


def permute_rows(table, vocab: VocabularyMap, *, fill: float = 0.0):
    """``table`` (V, ...) of the original ids as nmt's (V', ...): row i is original row order[i],
    a new row (order None) ``fill``."""
    import torch

    index = torch.tensor([0 if i is None else i for i in vocab.order])
    out = table.index_select(0, index).clone()
    for i, orig in enumerate(vocab.order):
        if orig is None:
            out[i] = fill
    return out
