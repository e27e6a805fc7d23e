"""Which characters of a translation came from which characters of its source: the model's piece
alignment (nmt.infer.attention_maps) turned into character spans, or, without one, a monotone guess.

    spans = piece_spans(sp, "Two dogs play.")            # [(0, 3), (3, 8), (8, 13), (13, 14)]
    pairs = char_pairs(src_spans, tgt_spans, [(0, 0), (1, 1)])  # [(0, 3, 0, 4), (3, 8, 4, 10)]

A pair (a, b, c, d) says that source characters [a, b) and output characters [c, d) were aligned.
nmt.realtext.markup places each tag around the output words aligned to the words it wrapped.
"""

from __future__ import annotations

import re
import unicodedata

Pair = tuple[int, int, int, int]  # source [a, b) aligned with output [c, d), character offsets
# scripts written without spaces between words (Chinese, Japanese: kana and CJK ideographs): each
# character is a token, so that a tag can wrap part of a run of them (Korean spaces its words)
UNSPACED = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"


def combining_marks() -> str:
    """The combining marks (Unicode categories Mn, Mc, Me: accents, vowel signs, viramas) as the ranges of
    a character class. All of them lie in planes 0, 1 and 14 (variation selectors)."""
    points = [
        c for c in [*range(0x20000), *range(0xE0000, 0xE1000)] if unicodedata.category(chr(c))[0] == "M"
    ]
    ranges, start = [], points[0]
    for prev, c in zip(points, points[1:] + [-1]):
        if c != prev + 1:
            ranges.append(f"\\U{start:08x}-\\U{prev:08x}")
            start = c
    return "".join(ranges)


# Python's \w leaves out combining marks: each follows the character before it into its token, so that a
# tag placed between tokens never parts a letter from its accent (e + U+0301) or a Devanagari consonant
# from its vowel sign
MARKS = combining_marks()
# a word, a CJK character or a punctuation mark, each with the combining marks after it
TOKEN = re.compile(rf"[{UNSPACED}][{MARKS}]*|(?:[^\W{UNSPACED}]|[{MARKS}])+|[^\w\s{MARKS}][{MARKS}]*")


def byte_to_char(text: str) -> list[int]:
    """For each UTF-8 byte offset of ``text`` (and its end), the character offset it falls in."""
    out = []
    for i, c in enumerate(text):
        out += [i] * len(c.encode("utf-8"))
    out.append(len(text))
    return out


def proto_spans(proto) -> list[tuple[int, int]]:
    """Character spans of the pieces of a SentencePieceText (its offsets are UTF-8 bytes), each
    without the space a word-initial piece carries."""
    text = proto.text
    to_char = byte_to_char(text)
    spans = []
    for p in proto.pieces:
        a, b = to_char[min(p.begin, len(to_char) - 1)], to_char[min(p.end, len(to_char) - 1)]
        while a < b and text[a].isspace():
            a += 1
        spans.append((a, b))
    return spans


def piece_spans(sp, text: str) -> list[tuple[int, int]]:
    """Character spans in ``text`` of the pieces SentencePiece encodes it into."""
    return proto_spans(sp.encode_as_proto(text))


def decoded_spans(sp, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """The text of output ids (reading order) and the character span of each of its pieces."""
    proto = sp.decode_ids_as_proto(ids)
    return proto.text, proto_spans(proto)


def char_pairs(
    src_spans: list[tuple[int, int]], tgt_spans: list[tuple[int, int]], pairs: list[tuple[int, int]]
) -> list[Pair]:
    """Piece alignment pairs (source piece i, output piece j) as character pairs; pairs naming a
    piece out of range (EOS, a truncated source) are left out."""
    out = []
    for i, j in pairs:
        if i < len(src_spans) and j < len(tgt_spans):
            out.append((*src_spans[i], *tgt_spans[j]))
    return out


def monotone_pairs(src: str, tgt: str) -> list[Pair]:
    """Without a model alignment: each output token (TOKEN) aligned with the source token at the
    same relative position (a monotone, length-proportional guess)."""
    s = [m.span() for m in TOKEN.finditer(src)]
    t = [m.span() for m in TOKEN.finditer(tgt)]
    if not s or not t:
        return []
    return [(*s[min(len(s) - 1, int((j + 0.5) * len(s) / len(t)))], *t[j]) for j in range(len(t))]


def shift(pairs: list[Pair], src_offset: int, tgt_offset: int) -> list[Pair]:
    """``pairs`` with both sides moved by these offsets (a sentence's pairs in its paragraph)."""
    return [(a + src_offset, b + src_offset, c + tgt_offset, d + tgt_offset) for a, b, c, d in pairs]
