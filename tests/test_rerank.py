"""Right-to-left models (model.right_to_left) and reranking an n-best with them (nmt.infer.rerank)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from train_fixtures import tiny_args
from translate_fixtures import cli

from nmt.checkpoint import save
from nmt.config import ConfigError, ModelConfig, tiny
from nmt.infer.rerank import Rerank, combine, reading_order, score_targets
from nmt.infer.search import BOS, EOS, Ensemble, length_penalty
from nmt.infer.translate import TranslateError, Translation, Translator
from nmt.model import Transformer

LINES = [
    "der hund",
    "",
    "ein baum und eine katze",
    "blau rot gross",
    "die katze springt auf den baum",
    "das haus neben dem baum",
    "eine kleine katze und ein grosser hund",
]
SEARCH = dict(beam=4, max_len_a=0, max_len_b=6)


def save_tiny(folder, spm_model, *, seed: int, **changes):
    torch.manual_seed(seed)
    cfg = dataclasses.replace(tiny(100), **changes)
    return save(
        folder,
        model=Transformer(cfg),
        spm_model=spm_model,
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": {}},
    )


@pytest.fixture(scope="module")
def r2l(tiny_checkpoint, tmp_path_factory):
    """A right-to-left random-weight model sharing the tiny checkpoint's SentencePiece model."""
    return save_tiny(
        tmp_path_factory.mktemp("r2l") / "checkpoint",
        tiny_checkpoint / "spm.model",
        seed=1,
        right_to_left=True,
    )


def incremental_logp(model, src: list[int], tgt: list[int]) -> float:
    """log p(tgt + EOS | src) one decode_step at a time (the search's path, not score_targets')."""
    memory = model.encode(torch.tensor([src]))
    cache, total, prev = None, 0.0, BOS
    for tok in tgt + [EOS]:
        logits, cache = model.decode_step(torch.tensor([[prev]]), memory, cache)
        total += F.log_softmax(logits[0, -1].float(), dim=-1)[tok].item()
        prev = tok
    return total


def test_config_right_to_left_is_checked_and_defaults_off():
    assert ModelConfig().right_to_left is False
    with pytest.raises(ConfigError, match="model.right_to_left"):
        ModelConfig(right_to_left="yes").validate()


def test_training_reverses_targets(tiny_data, tmp_path, monkeypatch):
    """A right-to-left run learns each target reversed (its source as it is); a left-to-right run
    of the same seed sees the same pairs the usual way round."""
    import nmt.train.run_data as run_data_module
    from nmt.cli import main
    from nmt.data.dataset import ParallelDataset

    seen = []
    real = run_data_module.collate
    monkeypatch.setattr(run_data_module, "collate", lambda ex: seen.append(ex) or real(ex))
    pairs = {s.tobytes(): t for s, t in ParallelDataset.load(tiny_data, "train")}
    args = tiny_args(
        "--train.max_steps=2",
        "--train.max_tokens=256",
        "--train.accum_steps=1",
        leave_out=("--train.warmup_steps=10",),
    )
    assert (
        main(["train", str(tiny_data), "--out", str(tmp_path / "r2l"), *args, "--model.right_to_left=true"])
        == 0
    )
    r2l_batches, seen[:] = seen[:2], []
    assert main(["train", str(tiny_data), "--out", str(tmp_path / "l2r"), *args]) == 0
    l2r_batches = seen[:2]
    for rb, lb in zip(r2l_batches, l2r_batches):
        assert len(rb) == len(lb) and rb
        for (rs, rt), (ls, lt) in zip(rb, lb):
            assert np.array_equal(rs, ls) and np.array_equal(lt, pairs[ls.tobytes()])
            assert np.array_equal(rt, lt[::-1]) and (len(lt) < 2 or not np.array_equal(rt, lt))
    saved = json.loads((tmp_path / "r2l" / "config.json").read_text())
    assert saved["model"]["right_to_left"] is True


def test_right_to_left_output_reads_forwards(r2l):
    """A right-to-left model's search gives ids last piece first; its text is their reversal decoded."""
    t = Translator.load(r2l, device="cpu", precision="fp32")
    nbest = t.translate_nbest(LINES, nbest=2, **SEARCH)
    for r in nbest:
        for c in r:
            assert c.text == (t.sp.decode(c.tokens[::-1]) if c.tokens else "")
    assert any(len(c.tokens) > 1 and t.sp.decode(c.tokens) != c.text for r in nbest for c in r)
    assert t.translate_sentences(LINES, **SEARCH) == [r[0].text for r in nbest]
    assert reading_order(t.model, [5, 6, 7]) == [7, 6, 5]


def test_score_targets_equals_incremental_decoding(tiny_checkpoint, r2l):
    """Teacher-forced scores (batched, padded) equal summing decode_step's log-probabilities; an
    ensemble's are the mean of its models'."""
    a = Translator.load(tiny_checkpoint, device="cpu", precision="fp32").model
    b = Translator.load(r2l, device="cpu", precision="fp32").model
    sources = [[5, 9, 12, EOS], [7, EOS], [30, 31, 32, 33, 34, 35, EOS]]
    targets = [[8, 8, 40], [], [50, 51, 52, 53, 54, 55, 56, 57]]
    got = score_targets(a, sources, targets, batch_tokens=12)  # small batches: several, padded
    want = [incremental_logp(a, s, t) for s, t in zip(sources, targets)]
    assert got == pytest.approx(want, abs=1e-4)
    both = score_targets(Ensemble([a, a]), sources, targets)
    assert both == pytest.approx(want, abs=1e-4)
    wb = [incremental_logp(b, s, t) for s, t in zip(sources, targets)]
    assert score_targets(b, sources, targets) == pytest.approx(wb, abs=1e-4)


def test_combine_by_hand():
    """((1-w) * own + w * theirs) / lp(|y|), own recovered from the search's normalised score."""
    alpha = 1.0
    cands = [
        Translation("a b", -2.0 / length_penalty(3, alpha), [5, 6]),
        Translation("a", -2.5 / length_penalty(2, alpha), [5]),
        Translation("c d e", -4.0 / length_penalty(4, alpha), [7, 8, 9]),
    ]
    theirs = [[-6.0, -2.6, -3.0]]
    keep = combine([cands], theirs, weight=0.0, alpha=alpha)[0]
    assert [t.text for t in keep] == ["a b", "a", "c d e"]
    half = combine([cands], theirs, weight=0.5, alpha=alpha)[0]
    want = {
        "a b": -4.0 / length_penalty(3, alpha),
        "a": -2.55 / length_penalty(2, alpha),
        "c d e": -3.5 / length_penalty(4, alpha),
    }
    assert [t.text for t in half] == sorted(want, key=lambda k: -want[k])
    assert {t.text: t.score for t in half} == pytest.approx(want)
    only = combine([cands], theirs, weight=1.0, alpha=alpha)[0]
    assert only[0].text == "c d e"  # -3/lp(4) = -1.0 beats -2.6/lp(2) = -2.23


def test_combine_picks_the_candidate_neither_direction_ranks_first():
    """Equal lengths (one lp): own -1, -5, -2 and theirs -6, -1, -2 give, at weight 0.5, -3.5, -3, -2:
    the compromise "c" wins, though the beam prefers "a" and the other direction "b"."""
    lp = length_penalty(3, 0.6)
    cands = [
        Translation("a", -1.0 / lp, [5, 6]),
        Translation("b", -5.0 / lp, [7, 8]),
        Translation("c", -2.0 / lp, [9, 10]),
    ]
    theirs = [[-6.0, -1.0, -2.0]]
    assert [t.text for t in combine([cands], theirs, weight=0.0, alpha=0.6)[0]] == ["a", "c", "b"]
    assert [t.text for t in combine([cands], theirs, weight=1.0, alpha=0.6)[0]] == ["b", "c", "a"]
    half = combine([cands], theirs, weight=0.5, alpha=0.6)[0]
    assert [(t.text, t.tokens) for t in half] == [("c", [9, 10]), ("b", [7, 8]), ("a", [5, 6])]
    assert [t.score for t in half] == pytest.approx([-2.0 / lp, -3.0 / lp, -3.5 / lp])


def test_rerank_with_itself_changes_nothing(tiny_checkpoint):
    """Rescoring with the searching model itself (any weight) keeps the beam's choice: the search's
    scores are the teacher-forced ones."""
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    plain = t.translate_sentences(LINES, **SEARCH)
    for w in (0.3, 1.0):
        assert (
            t.translate_sentences(
                LINES,
                rerank=Rerank(Translator.load(tiny_checkpoint, device="cpu", precision="fp32"), w),
                **SEARCH,
            )
            == plain
        )


def test_rerank_picks_the_combined_best(tiny_checkpoint, r2l, tmp_path):
    """API and CLI: the candidate of the beam's 4-best with the best combined score, the
    right-to-left model reading each candidate reversed (scored here one step at a time)."""
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    scorer = Translator.load(r2l, device="cpu", precision="fp32")
    nbest = t.translate_nbest(LINES, nbest=4, **SEARCH)
    sources, _ = t.encode(LINES)
    picks = {}
    for w in (0.0, 0.5, 1.0):
        want = []
        for src, r in zip(sources, nbest):
            if not src:
                want.append("")
                continue
            own = [c.score * length_penalty(len(c.tokens) + 1, 0.6) for c in r]
            theirs = [incremental_logp(scorer.model, src, c.tokens[::-1]) for c in r]
            comb = [
                ((1 - w) * o + w * th) / length_penalty(len(c.tokens) + 1, 0.6)
                for o, th, c in zip(own, theirs, r)
            ]
            want.append(r[int(np.argmax(comb))].text)
        assert t.translate_sentences(LINES, rerank=Rerank(scorer, w), **SEARCH) == want
        picks[w] = want
    assert picks[0.0] == [r[0].text for r in nbest]
    assert picks[1.0] != picks[0.0]  # random weights: the other direction disagrees on some lines
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert (
        cli(
            tiny_checkpoint,
            "-i",
            src,
            "-o",
            tmp_path / "out.txt",
            "--rerank",
            r2l,
            "--rerank-weight",
            "0.5",
            "--beam",
            "4",
            "--max-len-a",
            "0",
            "--max-len-b",
            "6",
            "--quiet",
            "--no-guards",
            "--precision",
            "fp32",
        )
        == 0
    )
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n") == picks[0.5] + [""]
    assert (
        cli(
            tiny_checkpoint,
            "-i",
            src,
            "-o",
            tmp_path / "nb.txt",
            "--rerank",
            r2l,
            "--rerank-weight",
            "0.5",
            "--nbest",
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
            "fp32",
        )
        == 0
    )
    rows = (tmp_path / "nb.txt").read_text(encoding="utf-8").splitlines()
    firsts = {}
    for row in rows:
        n, _, text = row.split("\t")
        firsts.setdefault(int(n), text)
    assert [firsts[i + 1] for i in range(len(LINES))] == picks[0.5]
    assert len(rows) == 2 * (len(LINES) - 1) + 1  # two per line, one for the empty line


def test_tune_alpha_with_rerank(tiny_checkpoint, r2l, tmp_path, capsys):
    """`nmt tune-alpha --rerank --rerank-weights`: a row per (alpha, weight), each the corpus BLEU
    of translate(rerank=Rerank(scorer, weight)); the best weight is printed and saved."""
    from sacrebleu.metrics import BLEU as Corpus
    from translate_fixtures import TUNE_LINES as lines
    from translate_fixtures import TUNE_REFS as refs
    from translate_fixtures import tune_alpha_args

    from nmt.infer.tune_command import run_tune_alpha

    args = tune_alpha_args(tiny_checkpoint, tmp_path, "--rerank", str(r2l), "--rerank-weights", "0,0.5,1")
    assert run_tune_alpha(args, {}) == 0
    out = capsys.readouterr().out
    assert "| alpha | rerank weight |" in out and "best rerank weight: " in out
    saved = json.loads((tmp_path / "a.json").read_text())
    assert [(r["alpha"], r["rerank_weight"]) for r in saved["rows"]] == [
        (a, w) for a in (0.0, 1.0) for w in (0.0, 0.5, 1.0)
    ]
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    scorer = Translator.load(r2l, device="cpu", precision="fp32")
    for row in saved["rows"]:
        hyps = t.translate_sentences(
            lines,
            beam=3,
            alpha=row["alpha"],
            max_len_a=0,
            max_len_b=5,
            rerank=Rerank(scorer, row["rerank_weight"]),
        )
        assert row["bleu"] == pytest.approx(Corpus().corpus_score(hyps, [refs]).score)
    best = max(saved["rows"], key=lambda r: r["bleu"])
    assert saved["best_rerank_weight"] is not None and best["bleu"] == max(r["bleu"] for r in saved["rows"])
    # the saved and printed choice is the documented one: highest BLEU, ties to the alpha nearest
    # 0.6, then the lower weight (every row scores 0 BLEU here: the tie-break decides)
    want = max(
        saved["rows"], key=lambda r: (round(r["bleu"], 10), -abs(r["alpha"] - 0.6), -r["rerank_weight"])
    )
    assert (want["alpha"], want["rerank_weight"]) == (1.0, 0.0)
    assert (saved["best_alpha"], saved["best_rerank_weight"]) == (1.0, 0.0)
    assert out.splitlines()[-2:] == ["best rerank weight: 0", "best alpha: 1"]


def test_tune_alpha_with_rerank_saves_the_weight_of_the_highest_bleu(tiny_checkpoint, r2l, tmp_path, capsys):
    """References that are the right-to-left-weighted outputs (weight 1, alpha 0): the rows that
    give them score 100, weight 0's rows (the beam's own choice, which differs on line 1) less; the
    saved and printed weight is the 100 rows' (0.5 and 1 tie: the lower), not the tie-break's 0."""
    from translate_fixtures import TUNE_LINES as lines
    from translate_fixtures import tune_alpha_args

    from nmt.infer.tune_command import run_tune_alpha

    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    scorer = Translator.load(r2l, device="cpu", precision="fp32")
    kw = dict(beam=3, alpha=0.0, max_len_a=0, max_len_b=5)
    refs = t.translate_sentences(lines, rerank=Rerank(scorer, 1.0), **kw)
    own = t.translate_sentences(lines, rerank=Rerank(scorer, 0.0), **kw)
    assert [a == b for a, b in zip(refs, own)] == [False, True, True, True]  # they disagree on line 1
    args = tune_alpha_args(tiny_checkpoint, tmp_path, "--rerank", str(r2l), "--rerank-weights", "0,0.5,1")
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    assert run_tune_alpha(args, {}) == 0
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "a.json").read_text())
    bleu = {(r["alpha"], r["rerank_weight"]): r["bleu"] for r in saved["rows"]}
    assert [bleu[(a, w)] == pytest.approx(100.0) for a in (0.0, 1.0) for w in (0.0, 0.5, 1.0)] == [
        False,
        True,
        True,
        False,
        True,
        True,
    ]
    assert (saved["best_alpha"], saved["best_rerank_weight"]) == (1.0, 0.5)
    assert out.splitlines()[-2:] == ["best rerank weight: 0.5", "best alpha: 1"]


@pytest.mark.parametrize(
    "extra,message",
    [
        (("--beam", "1"), "needs --beam >= 2"),
        (("--rerank-weight", "1.5"), "--rerank-weight 1.5: must be in [0, 1]"),
        (("--mbr",), "not with --sampling or --mbr"),
        (("--sampling",), "not with --sampling or --mbr"),
    ],
)
def test_rerank_bad_options(tiny_checkpoint, r2l, tmp_path, extra, message):
    src = tmp_path / "in.txt"
    src.write_text("der hund\n", encoding="utf-8")
    with pytest.raises(TranslateError, match=message.replace("[", r"\[").replace("]", r"\]")):
        cli(tiny_checkpoint, "-i", src, "-o", tmp_path / "out.txt", "--rerank", r2l, *extra)
    assert not (tmp_path / "out.txt").exists()


def test_right_to_left_refusals(tiny_checkpoint, r2l, tmp_path):
    """Mixed directions in one ensemble, a prefix for a right-to-left model, a rescoring model of
    another vocabulary and the exports of a right-to-left model are errors that say why."""
    from nmt.export.ctranslate2 import ExportError, check_left_to_right

    with pytest.raises(TranslateError, match="one direction"):
        Translator.load([tiny_checkpoint, r2l], device="cpu", precision="fp32")
    t = Translator.load(r2l, device="cpu", precision="fp32")
    with pytest.raises(TranslateError, match="needs a left-to-right model"):
        t.translate_nbest(["der hund"], prefix=["der"])
    with pytest.raises(ExportError, match="right-to-left"):
        check_left_to_right(t.model.cfg, "CTranslate2")
    import sentencepiece as spm

    other = tmp_path / "other"
    other.mkdir()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["zz yy xx ww vv uu"] * 50 + ["a b c d e f g h"] * 50),
        model_prefix=str(other / "spm"),
        vocab_size=40,
        model_type="bpe",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        character_coverage=1.0,
        minloglevel=2,
        hard_vocab_limit=False,
    )
    foreign = save_tiny(other / "checkpoint", other / "spm.model", seed=2, right_to_left=True)
    src = tmp_path / "in.txt"
    src.write_text("der hund\n", encoding="utf-8")
    with pytest.raises(TranslateError, match="vocabulary differs"):
        cli(tiny_checkpoint, "-i", src, "-o", tmp_path / "out.txt", "--rerank", foreign, "--quiet")


def test_right_to_left_alignment_in_reading_order(r2l):
    """--alignment of a right-to-left model gives target positions in reading order."""
    from nmt.infer.attention_maps import align, attention_maps, hard_alignment

    t = Translator.load(r2l, device="cpu", precision="fp32")
    src = t.encode(["ein baum und eine katze"])[0][0]
    tgt = [10, 11, 12, 13]  # model order: the last piece of the text first
    raw = hard_alignment(attention_maps(t.model, src, tgt).cross, src, tgt)
    got = align(t.model, src, tgt)
    assert got == [(i, 3 - j) for i, j in reversed(raw)]
    assert [j for _, j in got] == [0, 1, 2, 3]
