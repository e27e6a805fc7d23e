"""nmt.data.case_augment / `nmt prepare --case-augment P`: a seeded share of the train pairs in
ALL CAPS or Title Case on both sides, before the vocabulary is learnt; valid and test untouched."""

from pathlib import Path

import pytest
from train_fixtures import prepare_tiny

from nmt.data.case_augment import augment_case, title_case
from nmt.data.dataset import load_meta


def write_pairs(folder: Path, n: int) -> tuple[Path, Path]:
    src, tgt = folder / "s", folder / "t"
    src.write_text("".join(f"a small dog {i} runs.\n" for i in range(n)))
    tgt.write_text("".join(f"ein kleiner hund {i} rennt.\n" for i in range(n)))
    return src, tgt


def test_a_share_of_pairs_is_upper_or_title_cased_on_both_sides_alike(tmp_path):
    files = write_pairs(tmp_path, 1000)
    counts = augment_case(files, fraction=0.2, seed=1)
    src, tgt = (f.read_text().splitlines() for f in files)
    upper = [i for i, s in enumerate(src) if s.isupper()]
    title = [i for i, s in enumerate(src) if s.startswith("A Small")]
    assert counts == {"upper": len(upper), "title": len(title)}
    assert 150 <= len(upper) + len(title) <= 250 and min(len(upper), len(title)) > 60
    assert all(tgt[i] == f"EIN KLEINER HUND {i} RENNT." for i in upper)
    assert all(tgt[i] == f"Ein Kleiner Hund {i} Rennt." for i in title)
    rest = set(range(1000)) - set(upper) - set(title)
    assert all(src[i] == f"a small dog {i} runs." for i in rest)
    again = write_pairs(tmp_path, 1000)
    assert augment_case(again, fraction=0.2, seed=1) == counts  # seeded


def test_fraction_0_changes_nothing_and_a_bad_fraction_is_refused(tmp_path):
    files = write_pairs(tmp_path, 10)
    before = [f.read_text() for f in files]
    assert augment_case(files, fraction=0.0, seed=0) == {"upper": 0, "title": 0}
    assert [f.read_text() for f in files] == before
    with pytest.raises(ValueError, match="fraction 1.5"):
        augment_case(files, fraction=1.5, seed=0)
    assert title_case("two dogs' toys, 3x") == "Two Dogs' Toys, 3x"


def test_nmt_prepare_case_augment_records_it_and_learns_upper_case_pieces(tmp_path):
    data = prepare_tiny(tmp_path, vocab_size=120, case_augment=0.5)
    meta = load_meta(data)
    counts = meta["cleaning"]["train"]["case_augmented"]
    assert counts["upper"] > 0 and counts["title"] > 0 and meta["recipe"]["case_augment"] == 0.5
    vocab = (data / "spm.vocab").read_text()
    assert any(
        p.strip("▁").isupper() and len(p.strip("▁")) > 1
        for p in (line.split("\t")[0] for line in vocab.splitlines())
    )
    valid = (data / "valid.en.txt").read_text()
    assert not any(line.isupper() for line in valid.splitlines())
