"""nmt.infer.confidence: teacher-forced scores that agree with the search and with attention_maps,
whatever the batching; the isotonic map; the calibration's defaults, file and fit; words and ranks."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from conftest import tol

from nmt.config import tiny
from nmt.errors import UserError
from nmt.infer.attention_maps import attention_maps
from nmt.infer.confidence import (
    CALIBRATION,
    Calibration,
    CalibrationError,
    Isotonic,
    Sample,
    calibration_of,
    fit,
    forced_scores,
    spearman,
    word_log_probs,
)
from nmt.infer.options import SearchOptions
from nmt.infer.search import beam_search, length_penalty
from nmt.model import Transformer
from nmt.vocab import EOS, PAD

# sources of three lengths (ids + EOS) and outputs of other lengths, neither in length order
SOURCES = [[8, 8, 20, 31, 7, 6, EOS], [5, 9, 12, EOS], [11, 6, 14, 9, 30, 22, 17, 25, 19, EOS]]
OUTPUTS = [[6, 6, 10], [12, 30, 4, 9, 9, 17, 21, 5], [33]]


@pytest.fixture(scope="module")
def model():
    """A random tiny(40) model (seed 0) whose EOS embedding is 4 times as large: EOS logits of
    either sign and large, so that beam-4 hypotheses end early as well as at the length limit."""
    torch.manual_seed(0)
    m = Transformer(tiny(40)).eval()
    with torch.no_grad():
        m.decoder.embed_tokens.weight[EOS] *= 4
    return m


def piece_tol(model, length: int) -> float:
    """float32, a cached decoding step against a full forward: each log-probability through the
    encoder and decoder layers (d_model + d_ff and the positions attended, per layer) and the
    vocabulary's log-sum-exp, |log p| <= ~10; a sum of ``length`` of them, whose errors may add up
    in one direction (so times ``length``, not its square root)."""
    cfg = model.cfg
    n_accum = 2 * cfg.n_layers * (cfg.d_model + cfg.d_ff + 16) + cfg.tgt_vocab_size
    return length * tol(torch.float32, n_accum, scale=10.0)


def padded(rows):
    width = max(len(r) for r in rows)
    return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])


def test_forced_log_probs_sum_to_the_search_score_times_its_length_penalty(model):
    """Every beam-4 hypothesis (ended early or at the limit): sum of the forced log-probabilities
    (pieces, then EOS) == score * lp(|Y|), |Y| counting EOS. Leaving out EOS, or shifting the
    targets by one, is off by a whole log-probability."""
    options = SearchOptions(beam=4, alpha=0.6, nbest=4, max_len_a=1.0, max_len_b=3)
    searched = beam_search(model, padded(SOURCES), options)
    hyps = [h for nbest in searched for h in nbest]
    sources = [src for src, nbest in zip(SOURCES, searched) for _ in nbest]
    assert len(hyps) == 12 and len({len(h.tokens) for h in hyps}) >= 3  # ends of several lengths
    scored = forced_scores(model, sources, [h.tokens for h in hyps])
    for h, s in zip(hyps, scored):
        n = len(h.tokens) + 1
        assert len(s.log_probs) == n and s.coverage is None
        expected = h.score * length_penalty(n, 0.6)
        assert sum(s.log_probs) == pytest.approx(expected, abs=piece_tol(model, n))


def test_forced_scores_do_not_depend_on_the_batch(model):
    """Sentences of different lengths padded together, each alone, and in batches of one (a tiny
    max_tokens): the same log-probabilities and coverage, each in its own place."""
    together = forced_scores(model, SOURCES, OUTPUTS, coverage=True)
    alone = [forced_scores(model, [s], [o], coverage=True)[0] for s, o in zip(SOURCES, OUTPUTS)]
    small = forced_scores(model, SOURCES, OUTPUTS, coverage=True, max_tokens=1)
    for a, b, c, src, out in zip(together, alone, small, SOURCES, OUTPUTS):
        assert len(a.log_probs) == len(out) + 1 and len(a.coverage) == len(src) - 1
        eps = piece_tol(model, 1)
        for other in (b, c):
            assert other.log_probs == pytest.approx(a.log_probs, abs=eps)
            assert other.coverage == pytest.approx(a.coverage, abs=1e-5)


def test_coverage_is_the_last_layers_attention_averaged_over_heads_and_summed_over_the_pieces(model):
    """Coverage == attention_maps' last-layer cross-attention, mean over heads, rows of the output
    pieces (not the row that predicts EOS), columns of the source pieces (not EOS)."""
    for src, out, s in zip(SOURCES, OUTPUTS, forced_scores(model, SOURCES, OUTPUTS, coverage=True)):
        cross = attention_maps(model, src, out).cross[-1].mean(0)  # (T, S)
        expected = cross[: len(out), : len(src) - 1].sum(0)
        assert s.coverage == pytest.approx(expected.tolist(), abs=1e-5)
        assert sum(s.coverage) < len(out)  # EOS's column holds some of the mass


def test_coverage_of_a_source_without_eos_sums_to_the_output_pieces(model):
    """A model trained without source EOS: every column counts, each output piece's row sums to
    1, so the coverage sums to the output's pieces (padded in one batch: padding gets nothing)."""
    sources = [s[:-1] for s in SOURCES]
    for src, out, s in zip(sources, OUTPUTS, forced_scores(model, sources, OUTPUTS, coverage=True)):
        assert len(s.coverage) == len(src)
        assert sum(s.coverage) == pytest.approx(len(out), abs=1e-4)
        assert min(s.coverage) >= 0


def test_an_empty_source_gives_empty_scores_and_an_empty_output_scores_eos(model):
    empty, no_output = forced_scores(model, [[], SOURCES[1]], [[], []], coverage=True)
    assert empty.log_probs == [] and empty.coverage is None
    assert len(no_output.log_probs) == 1 and no_output.log_probs[0] < 0  # EOS alone
    assert no_output.coverage == [0.0] * (len(SOURCES[1]) - 1)
    assert forced_scores(model, [], []) == []


@pytest.mark.parametrize("coverage", [False, True])
def test_forced_scores_leave_the_models_mode_as_it_was(model, coverage):
    model.train()
    try:
        a = forced_scores(model, SOURCES[:1], OUTPUTS[:1], coverage=coverage)[0]
        assert model.training
    finally:
        model.eval()
    b = forced_scores(model, SOURCES[:1], OUTPUTS[:1], coverage=coverage)[0]
    assert a == b  # dropout was off for the pass
    assert not model.training


# ----------------------------------------------------------------------------- Isotonic
def test_isotonic_fit_pools_adjacent_violators_into_block_means():
    """y = [1, 3, 2, 4] at x = 0..3: (3, 2) violate, pooled to 2.5 at x 1.5."""
    iso = Isotonic.fit([0, 1, 2, 3], [1, 3, 2, 4])
    assert iso.xs == [0.0, 1.5, 3.0]
    assert iso.ys == [1.0, 2.5, 4.0]
    assert Isotonic.fit([3, 1, 0, 2], [4, 3, 1, 2]) == iso  # the points in any order


def test_isotonic_fit_of_a_violating_sequence_is_non_decreasing():
    y = [5, 1, 4, 2, 3, 0, 6, 2]
    iso = Isotonic.fit(list(range(len(y))), y)
    assert all(a < b for a, b in zip(iso.xs, iso.xs[1:]))
    assert all(a <= b for a, b in zip(iso.ys, iso.ys[1:]))
    grid = [iso(x / 10) for x in range(-20, 100)]
    assert all(a <= b + 1e-12 for a, b in zip(grid, grid[1:]))
    # the mean is kept: the blocks' means weighted by their sizes give the targets' mean
    assert iso.ys[0] == pytest.approx(sum(y[:6]) / 6)  # the first six pool to 2.5


def test_isotonic_map_interpolates_between_blocks_and_is_flat_beyond_the_ends():
    iso = Isotonic([0.0, 1.5, 3.0], [1.0, 2.5, 4.0])
    assert iso(0.75) == pytest.approx(1.75)
    assert iso(2.25) == pytest.approx(3.25)
    assert iso(1.5) == pytest.approx(2.5)
    assert iso(-100.0) == 1.0 and iso(0.0) == 1.0
    assert iso(100.0) == 4.0 and iso(3.0) == 4.0


def test_isotonic_fit_gives_equal_scores_one_value():
    iso = Isotonic.fit([0, 0, 1, 1], [0, 1, 0, 1])
    assert iso(0) == pytest.approx(0.5) and iso(1) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- Calibration
def test_uncalibrated_confidence_is_the_geometric_mean_of_the_pieces_probabilities():
    c = Calibration()
    assert not c.calibrated
    log_probs = [-0.1, -2.0, -0.5, -0.05]
    assert c.sentence(log_probs) == pytest.approx(math.exp(sum(log_probs) / 4))
    assert c.word(-0.7) == pytest.approx(math.exp(-0.7))
    assert c.sentence([]) == 1.0


def calibrated() -> Calibration:
    return Calibration(
        mix=[0.5, 0.25, 0.9],
        sentence_map=Isotonic([-1.0, 0.0, 0.5], [0.1, 0.4, 0.8]),
        word_logistic=[1.5, 0.5],
        length_ratio=[0.6, 1.8],
        fitted_on={"src": "valid.en", "sentences": 40},
    )


def test_calibration_is_saved_and_loaded_unchanged(tmp_path):
    c = calibrated()
    path = c.save(tmp_path)
    assert path == tmp_path / CALIBRATION and json.loads(path.read_text())["word_logistic"] == [1.5, 0.5]
    loaded = Calibration.load(tmp_path)
    assert loaded == c and loaded.calibrated
    log_probs = [-0.2, -1.3, -0.4]
    mean, least = sum(log_probs) / 3, min(log_probs)
    raw = 0.5 * mean + 0.25 * least + 0.9
    assert loaded.sentence(log_probs) == pytest.approx(c.sentence_map(raw))
    assert loaded.word(-0.4) == pytest.approx(1 / (1 + math.exp(-(1.5 * -0.4 + 0.5))))


def test_a_folder_without_confidence_json_is_uncalibrated(tmp_path):
    assert Calibration.load(tmp_path) == Calibration()
    assert Calibration.load(None) == Calibration()


@pytest.mark.parametrize(
    "text",
    ["{not json", "[1, 2]", '{"sentence_map": {"xs": [0, 1]}}', '{"length_ratio": ["a", 2]}', "\udcff"],
    ids=["not-json", "a-list", "map-without-ys", "ratio-not-numbers", "not-utf8"],
)
def test_a_corrupt_confidence_json_is_a_calibration_error_naming_the_file(tmp_path, text):
    path = tmp_path / CALIBRATION
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(CalibrationError) as e:
        Calibration.load(tmp_path)
    assert str(path) in str(e.value) and "nmt calibrate" in str(e.value)
    assert isinstance(e.value, UserError)


@pytest.mark.parametrize(
    "iso", [{"xs": [0.0, 1.0], "ys": [0.5]}, {"xs": [], "ys": []}], ids=["ragged", "empty"]
)
def test_a_sentence_map_of_unequal_or_empty_lists_is_a_calibration_error(tmp_path, iso):
    (tmp_path / CALIBRATION).write_text(json.dumps({"sentence_map": iso}))
    with pytest.raises(CalibrationError, match=CALIBRATION):
        Calibration.load(tmp_path)


def synthetic(n: int = 40) -> list[Sample]:
    """Sentences of mean log-probability m from -3 to -0.1 whose chrF is 100 (0.3 m + 1), an
    increasing function of it; their least log-probability lies 0.1 to 0.4 below the mean (not
    in step with it) and their lengths vary; their words are in the reference above -1.5."""
    samples = []
    for i in range(n):
        mean, spread = -3.0 + 2.9 * i / (n - 1), 0.1 + 0.3 * ((7 * i) % 5) / 4
        log_probs = [mean - spread, mean + spread] + [mean] * ((5 * i) % 7)
        words = [(mean, mean > -1.5), (mean - 0.2, mean > -1.3)]
        samples.append(Sample(log_probs, 100 * (0.3 * mean + 1), words, 1 + i / 100))
    return samples


def test_fit_on_chrf_increasing_with_the_mean_log_prob_ranks_sentences_perfectly():
    samples = synthetic()
    c = fit(list(reversed(samples)), {"src": "valid.en"})
    assert c.calibrated and c.fitted_on == {"src": "valid.en"}
    confidences = [c.sentence(s.log_probs) for s in samples]
    chrfs = [s.chrf for s in samples]
    assert spearman(confidences, chrfs) == 1.0
    assert all(0 <= x <= 1 for x in confidences)
    assert confidences == pytest.approx([x / 100 for x in chrfs], abs=1e-6)  # on the fitted points
    assert 0 <= c.sentence([-50.0]) <= c.sentence([-0.01] * 4) <= 1  # flat beyond the fitted scores
    # the word map: increasing, below one half where the reference lacks the word, above where it has it
    assert c.word(-3.0) < 0.5 < c.word(-0.1) and c.word(-2.0) < c.word(-1.0)
    assert c.length_ratio == pytest.approx([1.0, 1.39])  # the 0.5% and 99.5% quantiles of 40 ratios


def test_fit_on_sentences_whose_least_and_mean_log_prob_move_together_ranks_them_every_time():
    samples = [
        Sample([sum(s.log_probs) / len(s.log_probs)] * 3, s.chrf, s.words, s.ratio) for s in synthetic()
    ]
    chrfs = [s.chrf for s in samples]
    for _ in range(20):  # each call, since the wrong answers come at random
        c = fit(samples, {})
        assert spearman([c.sentence(s.log_probs) for s in samples], chrfs) == 1.0


def test_fit_refuses_fewer_than_20_sentences():
    with pytest.raises(CalibrationError, match="at least 20 sentences, got 19"):
        fit(synthetic(19), {})


def test_calibration_of_a_checkpoint_its_run_and_its_export(tiny_checkpoint, tmp_path):
    """A checkpoint's confidence.json is found from the checkpoint, from a CTranslate2 export's
    nmt_export.json naming it, and by Translator.load; a checkpoint without one: uncalibrated."""
    from nmt.infer.translate import Translator

    assert calibration_of(tiny_checkpoint) == Calibration()
    ckpt = shutil.copytree(tiny_checkpoint, tmp_path / "checkpoint")
    calibrated().save(ckpt)
    assert calibration_of(ckpt) == calibrated()
    export = tmp_path / "ct2"
    export.mkdir()
    (export / "nmt_export.json").write_text(json.dumps({"source": str(ckpt)}))
    assert calibration_of(export) == calibrated()
    assert Translator.load(ckpt, device="cpu").calibration == calibrated()


def test_the_ctranslate2_engine_scores_a_model_without_source_eos_as_the_torch_engine(
    tiny_checkpoint, tmp_path
):
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    import dataclasses

    from nmt.checkpoint import save
    from nmt.cli import main
    from nmt.infer.translate import Translator

    torch.manual_seed(0)
    cfg = dataclasses.replace(tiny(100), source_eos=False)  # tiny_checkpoint's model, without source EOS
    config = {"model": dataclasses.asdict(cfg), "train": {}, "data": {}}
    ckpt = save(
        tmp_path / "ckpt", model=Transformer(cfg), config=config, spm_model=tiny_checkpoint / "spm.model"
    )
    assert main(["export", "ctranslate2", str(ckpt), str(tmp_path / "ct2")]) == 0
    ours = Translator.load(ckpt, device="cpu", precision="fp32")
    theirs = Translator.load(tmp_path / "ct2", engine="ctranslate2", precision="fp32")
    sources, _ = ours.encode(["der hund und die katze", "ein baum"])
    assert all(EOS not in s for s in sources)
    outputs = [[10, 11, 12], [20, 21]]
    for a, b in zip(ours.forced_scores(sources, outputs), theirs.forced_scores(sources, outputs)):
        assert b.log_probs == pytest.approx(a.log_probs, abs=1e-4)


# ----------------------------------------------------------------------------- words and ranks
def test_word_log_probs_join_pieces_into_words_with_their_mean():
    pieces = ["▁Ein", "▁Hun", "d", "."]
    words = word_log_probs(pieces, [-0.1, -1.0, -3.0, -0.5])
    assert [w for w, _ in words] == ["Ein", "Hund."]  # as the text splits on spaces
    assert [lp for _, lp in words] == pytest.approx([-0.1, -1.5])
    # a lone "▁" piece starts the next word; a first piece without "▁" is a word of its own
    words = word_log_probs(["Ab", "c", "▁", "5", "▁km", "▁"], [-1.0, -3.0, -0.2, -0.4, -0.6, -9.0])
    assert [w for w, _ in words] == ["Abc", "5", "km"]
    assert [lp for _, lp in words] == pytest.approx([-2.0, -0.3, -0.6])


def test_spearman_gives_ties_their_mean_rank():
    """x = [1, 2, 2, 3] ranks [0, 1.5, 1.5, 3], y = [1, 3, 2, 4] ranks [0, 2, 1, 3]: deviations
    (-1.5, 0, 0, 1.5) and (-1.5, .5, -.5, 1.5), covariance 4.5 over sqrt(4.5 * 5)."""
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [0.4, 0.3, 0.2, 0.1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) == 0.0  # no ranking: no correlation
