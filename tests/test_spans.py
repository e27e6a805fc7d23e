"""nmt.realtext.spans: SentencePiece's UTF-8 byte offsets as character offsets, on characters of 2 (ü,
ß), 3 (東, 京) and 4 (😀) bytes and on a combining accent; the character pairs built from them; the
monotone guess's tokens. Every check slices the text with the offsets, so byte offsets read as
character offsets fail it."""

import io
from types import SimpleNamespace

import pytest

from nmt.realtext.spans import (
    TOKEN,
    byte_to_char,
    char_pairs,
    decoded_spans,
    monotone_pairs,
    piece_spans,
    proto_spans,
    shift,
)

TEXT = "Müller sagt groß 東京 😀."  # its last piece, a 1-byte full stop, ends at the text's end
PIECES = ["Müller", "s", "a", "g", "t", "groß", "東京", "😀", "."]  # the non-empty ones


@pytest.fixture(scope="module")
def sp():
    """A character SentencePiece model in which Müller, groß and 東京 are single pieces."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["Müller sagt, dass die Straße groß ist.", "東京は都市。", "café naïve 😀"]),
        model_writer=model,
        model_type="char",
        user_defined_symbols=["Müller", "groß", "東京"],
        vocab_size=40,
        hard_vocab_limit=False,
        character_coverage=1.0,
        minloglevel=2,
    )
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def test_each_utf8_byte_maps_to_the_character_it_falls_in_and_the_end_to_the_length():
    assert byte_to_char("aü東😀") == [0, 1, 1, 2, 2, 2, 3, 3, 3, 3, 4]
    assert byte_to_char("e\u0301") == [0, 1, 1, 2]  # e, then the 2-byte combining acute accent
    assert byte_to_char("") == [0]


def test_proto_spans_are_character_spans_without_the_space_of_a_word_initial_piece():
    text = "Müller 東京 😀"  # bytes: Müller 0-7, " 東京" 7-14, " 😀" 14-19
    pieces = [SimpleNamespace(begin=a, end=b) for a, b in [(0, 7), (7, 14), (14, 19)]]
    spans = proto_spans(SimpleNamespace(text=text, pieces=pieces))
    assert spans == [(0, 6), (7, 9), (10, 11)]
    assert [text[a:b] for a, b in spans] == ["Müller", "東京", "😀"]


def test_piece_spans_slice_each_piece_out_of_text_with_multibyte_characters(sp):
    spans = piece_spans(sp, TEXT)
    assert [TEXT[a:b] for a, b in spans if a < b] == PIECES
    assert spans[-1] == (len(TEXT) - 1, len(TEXT))


def test_a_combining_accent_is_in_the_span_of_the_piece_of_its_base_letter(sp):
    # SentencePiece reads "e" + U+0301 as the one piece é; its span covers both characters
    text = "cafe\u0301 naïve"
    spans = piece_spans(sp, text)
    assert [text[a:b] for a, b in spans if a < b] == ["c", "a", "f", "e\u0301", "n", "a", "ï", "v", "e"]
    assert spans[-1][1] == len(text)


def test_decoded_spans_are_the_character_spans_of_the_pieces_in_the_decoded_text(sp):
    text, spans = decoded_spans(sp, sp.encode_as_ids(TEXT))
    assert text == TEXT
    assert [text[a:b] for a, b in spans if a < b] == PIECES
    assert spans[-1][1] == len(text)


def test_char_pairs_align_the_characters_of_aligned_pieces_and_leave_out_pieces_out_of_range(sp):
    src, tgt = "Müller sagt groß.", "東京 😀 Müller"
    src_spans = piece_spans(sp, src)
    tgt_text, tgt_spans = decoded_spans(sp, sp.encode_as_ids(tgt))
    src_pieces = [p.piece for p in sp.encode_as_proto(src).pieces]
    tgt_pieces = [p.piece for p in sp.encode_as_proto(tgt).pieces]
    at_src, at_tgt = src_pieces.index, tgt_pieces.index
    pairs = [
        (at_src("Müller"), at_tgt("Müller")),
        (at_src("groß"), at_tgt("東京")),
        (at_src("."), at_tgt("😀")),
    ]
    out_of_range = [(len(src_spans), 0), (0, len(tgt_spans))]  # EOS, a piece past the output
    got = char_pairs(src_spans, tgt_spans, pairs + out_of_range)
    assert [(src[a:b], tgt_text[c:d]) for a, b, c, d in got] == [
        ("Müller", "Müller"),
        ("groß", "東京"),
        (".", "😀"),
    ]


def test_monotone_pairs_align_words_cjk_characters_and_emoji_by_their_character_offsets():
    src, tgt = "Müller sagt: 東京 ist groß 😀.", "Müller says: 東京 is big 😀."
    got = [(src[a:b], tgt[c:d]) for a, b, c, d in monotone_pairs(src, tgt)]
    assert got == [
        ("Müller", "Müller"),
        ("sagt", "says"),
        (":", ":"),
        ("東", "東"),
        ("京", "京"),
        ("ist", "is"),
        ("groß", "big"),
        ("😀", "😀"),
        (".", "."),
    ]
    assert monotone_pairs("", tgt) == [] and monotone_pairs(src, " ") == []


def test_a_combining_mark_belongs_to_the_token_of_the_letter_before_it():
    # a tag placed at token boundaries never separates a letter from its accent or vowel sign
    assert TOKEN.findall("cafe\u0301, hindi हिन्दी भाषा.") == [
        "cafe\u0301",
        ",",
        "hindi",
        "हिन्दी",
        "भाषा",
        ".",
    ]
    assert TOKEN.findall("か\u3099き") == ["か\u3099", "き"]  # a kana with a combining voiced mark
    src, tgt = "Das cafe\u0301.", "The cafe\u0301."
    assert [(src[a:b], tgt[c:d]) for a, b, c, d in monotone_pairs(src, tgt)][1] == (
        "cafe\u0301",
        "cafe\u0301",
    )


def test_shift_moves_a_sentences_pairs_to_their_place_in_its_paragraph():
    src, tgt = "Grüße. Müller sagt.", "東京。Müller says."
    pairs = monotone_pairs("Müller sagt.", "Müller says.")
    got = [(src[a:b], tgt[c:d]) for a, b, c, d in shift(pairs, len("Grüße. "), len("東京。"))]
    assert got == [("Müller", "Müller"), ("sagt", "says"), (".", ".")]
