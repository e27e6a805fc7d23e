"""Minimum-Bayes-risk selection (nmt.infer.mbr): chrF against sacreBLEU, the selection rule on
hand-built candidates, and `nmt translate --mbr` / `Translator.translate_sentences(mbr=...)` on a
tiny model."""

import math

import pytest
from sacrebleu.metrics import BLEU, CHRF
from translate_fixtures import cli

from nmt.infer.mbr import MBR, mbr_select, mbr_weights, sentence_chrf, utility_matrix
from nmt.infer.translate import TranslateError, Translator

PAIRS = [
    ("Ein Mann fährt Fahrrad.", "Ein Mann fährt ein Fahrrad."),
    ("Zwei Hunde", "Zwei Hunde spielen im Schnee."),
    ("Zwei Hunde spielen im Schnee.", "Zwei Hunde"),
    ("a", "b"),
    ("", "x"),
    ("x", ""),
    ("", ""),
    ("ab", "abc"),
    ("Das ist gut", "Das ist gut"),
    ("Das  ist\tgut", "Dasistgut"),
    ("漢字のテスト。", "漢字テスト"),
    ("e\u0301 \u00e9", "\u00e9"),
    ("der der der der", "der"),
]


@pytest.mark.parametrize("hyp,ref", PAIRS)
def test_sentence_chrf_equals_sacrebleu(hyp, ref):
    assert sentence_chrf(hyp, ref) == pytest.approx(CHRF().sentence_score(hyp, [ref]).score, abs=1e-9)


def test_utility_matrices():
    texts = ["Ein Hund läuft.", "Ein Hund rennt.", "Eine Katze schläft auf dem Sofa."]
    chrf, bleu = utility_matrix(texts, "chrf"), utility_matrix(texts, "bleu")
    scorer = BLEU(effective_order=True)
    for i, hi in enumerate(texts):
        for j, hj in enumerate(texts):
            assert chrf[i][j] == pytest.approx(CHRF().sentence_score(hi, [hj]).score)
            assert bleu[i][j] == pytest.approx(scorer.sentence_score(hi, [hj]).score)
    assert chrf[0][0] == pytest.approx(100.0) and bleu[0][0] == pytest.approx(100.0)
    with pytest.raises(ValueError, match="utility='ter'"):
        utility_matrix(texts, "ter")


def test_weights_are_a_tempered_softmax():
    w = mbr_weights([-1.0, -2.0, float("-inf")], 0.5)
    z = math.exp(-2) + math.exp(-4)
    assert w == pytest.approx([math.exp(-2) / z, math.exp(-4) / z, 0.0])
    assert mbr_weights([float("-inf")] * 2, 1.0) == [0.5, 0.5]
    with pytest.raises(ValueError, match="must be > 0"):
        mbr_weights([0.0], 0.0)


def test_selection_rule_by_hand():
    """Candidate 0 has the best model score but is an outlier; 1 and 2 agree with each other.
    Expected chrF with the weights computed by hand picks the consensus at T=1, and the top-scored
    candidate as T -> 0."""
    texts = ["Katzen schlafen.", "Ein Hund läuft im Park.", "Ein Hund rennt im Park."]
    scores = [-0.9, -1.0, -1.1]
    u = utility_matrix(texts, "chrf")
    w = mbr_weights(scores, 1.0)
    expected = [sum(wj * u[i][j] for j, wj in enumerate(w)) for i in range(3)]
    assert max(range(3), key=expected.__getitem__) == 1
    assert mbr_select(texts, scores, temperature=1.0) == 1
    assert mbr_select(texts, scores, temperature=0.01) == 0  # nearly all weight on the top score
    assert mbr_select(["x"], [-5.0]) == 0
    assert mbr_select(["gleich", "gleich"], [-1.0, -1.0]) == 0  # ties: the earlier (better beam rank)
    with pytest.raises(ValueError, match="2 candidates and 1 scores"):
        mbr_select(["a", "b"], [0.0])


def test_mbr_options_are_checked():
    with pytest.raises(ValueError, match="utility='meteor'"):
        MBR("meteor")
    with pytest.raises(ValueError, match="temperature=0"):
        MBR("chrf", 0)


def test_translate_mbr_cli_and_api(tiny_checkpoint, tmp_path):
    """`--mbr` writes, per line, the candidate of the beam's n-best (the search's `nbest=beam`
    list) that mbr_select picks; the API gives the same, and differs from the top candidates."""
    lines = [
        "der hund",
        "",
        "ein baum und eine katze",
        "blau rot gross",
        "die katze springt auf den baum",
        "das haus neben dem baum",
        "eine kleine katze und ein grosser hund",
    ]
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    search = dict(beam=4, max_len_a=0, max_len_b=6)
    nbest = t.translate_nbest(lines, nbest=4, **search)
    want = [r[mbr_select([c.text for c in r], [c.score for c in r], temperature=2.0)].text for r in nbest]
    assert t.translate_sentences(lines, mbr=MBR("chrf", 2.0), **search) == want
    assert want != [r[0].text for r in nbest]  # random weights: flat distributions, MBR moves some
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "mbr.txt"
    assert (
        cli(
            tiny_checkpoint,
            "-i",
            src,
            "-o",
            out,
            "--mbr",
            "--mbr-temperature",
            "2",
            "--beam",
            "4",
            "--max-len-a",
            "0",
            "--max-len-b",
            "6",
            "--quiet",
            "--no-guards",
            "--precision",
            "fp32",  # as the Translator above: `auto` is bf16 on CPUs with AMX/AVX512-BF16
        )
        == 0
    )
    got = out.read_text(encoding="utf-8").split("\n")
    assert got == want + [""] and got[1] == ""
    bleu_pick = [
        r[mbr_select([c.text for c in r], [c.score for c in r], utility="bleu", temperature=0.5)].text
        for r in nbest
    ]
    assert t.translate_sentences(lines, mbr=MBR("bleu", 0.5), **search) == bleu_pick


def test_tune_alpha_with_mbr(tiny_checkpoint, tmp_path, capsys):
    """`nmt tune-alpha --mbr` scores, per alpha, the outputs of `translate(mbr=...)`."""
    import json

    from sacrebleu.metrics import BLEU as Corpus
    from translate_fixtures import TUNE_LINES as lines
    from translate_fixtures import TUNE_REFS as refs
    from translate_fixtures import tune_alpha_args

    from nmt.infer.tune_command import run_tune_alpha

    args = tune_alpha_args(tiny_checkpoint, tmp_path, "--mbr", "--mbr-temperature", "1.5")
    assert run_tune_alpha(args, {}) == 0
    assert "MBR (chrf, T=1.5) among the 3-best" in capsys.readouterr().out
    saved = json.loads((tmp_path / "a.json").read_text())
    assert saved["mbr"] == {"utility": "chrf", "temperature": 1.5}
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    for row in saved["rows"]:
        hyps = t.translate_sentences(
            lines, beam=3, alpha=row["alpha"], max_len_a=0, max_len_b=5, mbr=MBR("chrf", 1.5)
        )
        assert row["bleu"] == pytest.approx(Corpus().corpus_score(hyps, [refs]).score)


@pytest.mark.parametrize(
    "extra,message",
    [
        (("--nbest", "2"), "needs --beam >= 2, --nbest 1"),
        (("--sampling",), "no --sampling"),
        (("--beam", "1"), "needs --beam >= 2"),
        (("--mbr-temperature", "0"), "--mbr-temperature 0.0: must be > 0"),
    ],
)
def test_translate_mbr_bad_options(tiny_checkpoint, tmp_path, extra, message):
    src = tmp_path / "in.txt"
    src.write_text("der hund\n", encoding="utf-8")
    with pytest.raises(TranslateError, match=message):
        cli(tiny_checkpoint, "-i", src, "-o", tmp_path / "o.txt", "--mbr", "--beam", "2", *extra)
    assert not (tmp_path / "o.txt").exists()
