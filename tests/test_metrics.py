"""`nmt score`: exactly sacreBLEU's numbers on real references, and the labelled paper BLEU."""

import argparse
import json
import os
from pathlib import Path

import pytest
import sacrebleu

from nmt.cli import add_score_args, run_score
from nmt.data.lines import read_lines
from nmt.metrics import PAPER_BLEU_LABEL, ScoreError, corpus_scores, paper_bleu, split_compounds

DATA = Path(os.environ.get("NMT_DATA_DIR", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
REFS = {"13a": DATA / "wmt14_en_de" / "test.de.gz", "zh": DATA / "wmt_zh_en" / "test.zh.gz"}
N_LINES = 500  # the first lines of each test set keep the test fast


def perturb(lines):
    """Drop every 5th word (Chinese: every 5th character) and swap the first two of every 3rd line."""
    out = []
    for i, line in enumerate(lines):
        units = line.split() if " " in line else list(line)
        units = [u for j, u in enumerate(units) if j % 5 != 4]
        if i % 3 == 0 and len(units) > 1:
            units[0], units[1] = units[1], units[0]
        out.append((" " if " " in line else "").join(units))
    return out


def score_cli(tmp_path, capsys, hyps, ref_path, *extra):
    hyp_path = tmp_path / "hyp.txt"
    hyp_path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_score_args(parser)
    assert run_score(parser.parse_args([str(hyp_path), "--ref", str(ref_path), *extra]), {}) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("tokenize", ["13a", "zh"])
def test_score_equals_sacrebleu(tokenize, tmp_path, capsys):
    ref_file = REFS[tokenize]
    if not ref_file.exists():
        pytest.skip(f"{ref_file} absent (set NMT_DATA_DIR to the shared data directory)")
    full = list(read_lines(ref_file))
    refs = full[:N_LINES]
    ref_path = tmp_path / "ref.txt"
    ref_path.write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    for hyps, expect_100 in ((refs, True), (perturb(refs), False)):
        bleu = sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize)
        chrf = sacrebleu.corpus_chrf(hyps, [refs])
        s = corpus_scores(hyps, [refs], tokenize=tokenize)
        assert s.bleu == bleu.score and s.chrf == chrf.score
        assert (s.bleu == pytest.approx(100.0) and s.chrf == pytest.approx(100.0)) == expect_100
        assert f"tok:{tokenize}" in s.bleu_signature and "nrefs:1" in s.bleu_signature
        out = json.loads(
            score_cli(tmp_path, capsys, hyps, ref_path, "--tokenize", tokenize, "--format", "json")
        )
        assert out["bleu"] == bleu.score and out["chrf"] == chrf.score
    text = score_cli(tmp_path, capsys, hyps, ref_path, "--tokenize", tokenize)
    assert f"BLEU = {bleu.score:.2f}" in text and f"chrF2 = {chrf.score:.2f}" in text
    assert "signature: nrefs:1|case:mixed|eff:no|tok:" + tokenize in text
    print(f"{tokenize}: perturbed copy BLEU {s.bleu:.2f} chrF {s.chrf:.2f}")
    assert 10 < s.bleu < 90 and 10 < s.chrf < 95


def test_paper_bleu_compound_split_and_label(tmp_path, capsys):
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    assert split_compounds("a-b-c x - y") == "a ##AT##-##AT## b-c x - y"  # as perl s///g
    hyps, refs = ["Das ist ein Welt-Rekord ."], ["Das ist ein Weltrekord ."]
    # tokenized: "Das ist ein Welt ##AT##-##AT## Rekord ." vs "Das ist ein Weltrekord ."
    expected = sacrebleu.corpus_bleu(
        ["Das ist ein Welt ##AT##-##AT## Rekord ."], [refs], tokenize="none", smooth_method="none", force=True
    ).score
    assert paper_bleu(hyps, [refs]) == expected
    ref = tmp_path / "ref.txt"
    ref.write_text("The state-of-the-art model, it said.\n", encoding="utf-8")
    out = score_cli(tmp_path, capsys, ["The state-of-the-art model, it said."], ref, "--paper-bleu")
    assert f"{PAPER_BLEU_LABEL} = 100.00" in out


def test_line_count_mismatch_is_an_error(tmp_path):
    (tmp_path / "h").write_text("a\nb\n")
    (tmp_path / "r").write_text("a\n")
    parser = argparse.ArgumentParser()
    add_score_args(parser)
    with pytest.raises(ScoreError, match="2 lines but .* has 1"):
        run_score(parser.parse_args([str(tmp_path / "h"), "--ref", str(tmp_path / "r")]), {})
