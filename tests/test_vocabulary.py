"""An imported vocabulary at nmt's ids (nmt/imports/vocabulary.py): the special tokens moved to PAD 0,
UNK 1, BOS 2, EOS 3, new rows where the original has none, and a SentencePiece model on those ids that
segments as the original and never produces the other side's pieces."""

from __future__ import annotations

import pytest
import torch
from import_fixtures import SENTENCES, train_spm

from nmt.imports.vocabulary import (
    PAD_LOGIT,
    VocabularyError,
    joint_spm,
    load_processor,
    permute_rows,
    special_ids,
)


def test_marian_layout_moves_the_specials_and_gives_pad_a_new_row():
    pieces = ["</s>", "<unk>", "▁a", "▁b", "<pad>"]  # Marian: eos 0, unk 1, pad = decoder start = last
    v = special_ids(pieces, pad=4, unk=1, eos=0, start=4, source="vocab.json")
    assert v.order == [None, 1, 4, 0, 2, 3] and v.new_rows == 1
    assert v.pieces == ["<pad>", "<unk>", "<s>", "</s>", "▁a", "▁b"]
    table = torch.arange(5.0)[:, None].repeat(1, 2)  # row i holds i
    assert permute_rows(table, v)[:, 0].tolist() == [0.0, 1.0, 4.0, 0.0, 2.0, 3.0]
    assert permute_rows(torch.arange(5.0), v, fill=PAD_LOGIT).tolist() == [PAD_LOGIT, 1, 4, 0, 2, 3]


def test_ctranslate2_layouts():
    nmt_export = ["<blank>", "<unk>", "<s>", "</s>", "▁a"]
    assert special_ids(nmt_export, pad=0, unk=1, eos=3, start=2, source="x").order == [0, 1, 2, 3, 4]
    zero_start = ["</s>", "<unk>", "▁a"]  # no padding token, the decoder starts from a zero vector
    v = special_ids(zero_start, pad=None, unk=1, eos=0, start=None, source="x")
    assert v.order == [None, 1, None, 0, 2] and v.new_rows == 2


@pytest.mark.parametrize(
    "pieces,ids,message",
    [
        (["</s>", "<unk>", "<s>", "<pad>"], dict(pad=3, unk=1, eos=0, start=3), "'<s>' appears twice"),
        (["</s>", "<unk>", "<pad>"], dict(pad=2, unk=1, eos=0, start=7), "decoder start id 7 outside"),
        (["</s>", "<unk>", "<pad>"], dict(pad=2, unk=0, eos=0, start=2), "must differ"),
    ],
)
def test_inconsistent_vocabularies_are_refused(pieces, ids, message):
    with pytest.raises(VocabularyError, match=message):
        special_ids(pieces, **ids, source="vocab.json")


def test_joint_model_segments_as_the_original_and_decodes_the_other_sides_pieces():
    src = train_spm(SENTENCES, 45)
    original = load_processor(src, source="source.spm")
    own = [original.id_to_piece(i) for i in range(3, original.get_piece_size())]
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "▁zzq", ">>de<<", *reversed(own)]  # another order, extras
    joint, missing = joint_spm(src, pieces, source="source.spm")
    sp = load_processor(joint, source="joint")
    assert missing == 0 and (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    for line in SENTENCES[:50] + ["zzq dog >>de<< cat"]:
        assert sp.encode(line, out_type=str) == original.encode(line, out_type=str) or ">>de<<" in line
    assert ">>de<<" in sp.encode(">>de<< dog", out_type=str)  # a target tag is one piece
    assert "▁zzq" not in sp.encode("zzq", out_type=str)  # UNUSED: never produced
    assert sp.decode([4, sp.piece_to_id("▁dog")]) == "zzq dog"  # but decoded as its text
    assert joint_spm(src, pieces[:-2], source="s")[1] == 2  # pieces the vocabulary lacks, counted


def test_not_a_sentencepiece_model():
    with pytest.raises(VocabularyError, match="source.spm: not a"):
        joint_spm(b"\x00garbage", ["<pad>"], source="source.spm")
