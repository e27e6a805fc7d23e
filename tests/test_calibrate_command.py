"""`nmt calibrate CHECKPOINT --src --ref [--out]` end to end on the tests' small trained run: it
writes confidence.json into the checkpoint (or --out), which Translator.load then reads; bad input
is a one-line error (exit 2)."""

from __future__ import annotations

import shutil

import pytest

from nmt.checkpoint import resolve_checkpoint
from nmt.cli import main
from nmt.infer.confidence import CALIBRATION, Calibration
from nmt.infer.options import SearchOptions
from nmt.infer.translate import Translator
from nmt.realtext.pipeline import TranslationRequest, translate_request
from nmt.realtext.quality import score_results


@pytest.fixture(scope="module")
def valid_text(tiny_data):
    """The tiny corpus's validation pair (40 lines), which the small run was trained beside."""
    text = tiny_data.parent / "text"
    return text / "valid.en", text / "valid.de"


def test_calibrate_writes_confidence_json_that_translations_then_use(run_dir, valid_text, tmp_path, capsys):
    run = shutil.copytree(run_dir, tmp_path / "run")  # calibrate writes into the checkpoint
    src, ref = valid_text
    assert main(["calibrate", str(run), "--src", str(src), "--ref", str(ref)]) == 0
    path = resolve_checkpoint(run) / CALIBRATION
    out = capsys.readouterr().out
    assert f"{path}: fitted on 40 sentences of {src}" in out and "Spearman" in out
    calibration = Calibration.load(path.parent)
    assert calibration.calibrated and calibration.word_logistic is not None
    fitted = calibration.fitted_on
    assert (fitted["src"], fitted["ref"], fitted["sentences"], fitted["beam"]) == (
        "valid.en",
        "valid.de",
        40,
        4,
    )
    assert -1 <= fitted["spearman"] <= 1 and 0 <= fitted["worst_caught"] <= 1
    lo, hi = calibration.length_ratio
    assert 0 < lo <= hi  # the references' pieces over the sources'
    assert not (resolve_checkpoint(run_dir) / CALIBRATION).exists()  # the original untouched

    translator = Translator.load(run, device="cpu", precision="fp32")
    assert translator.calibration == calibration
    line = "the dog sees a red ball"
    [out] = translate_request(translator, TranslationRequest((line,)))
    [[best]] = translator.translate_nbest([line], SearchOptions())
    score_results(translator, [line], [[best]], coverage=False)
    assert best.text == out.text
    assert 0 <= out.confidence <= 1
    assert out.confidence == pytest.approx(calibration.sentence(best.log_probs))
    assert out.confidence != pytest.approx(Calibration().sentence(best.log_probs))  # the map, not exp(mean)


def test_calibrate_out_writes_elsewhere_and_leaves_the_checkpoint_alone(
    run_dir, valid_text, tmp_path, monkeypatch
):
    src, ref = valid_text
    out = tmp_path / "calibration"
    searched = []
    search = Translator.translate_nbest

    def spy(self, sentences, options=None, **kw):
        searched.append(options)
        return search(self, sentences, options, **kw)

    monkeypatch.setattr(Translator, "translate_nbest", spy)
    assert (
        main(
            [
                "calibrate",
                str(run_dir),
                "--src",
                str(src),
                "--ref",
                str(ref),
                "--beam",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert Calibration.load(out).fitted_on["beam"] == 1
    assert [(o.beam, o.alpha) for o in searched] == [(1, 0.6)]  # --beam 1, the default alpha
    assert not (resolve_checkpoint(run_dir) / CALIBRATION).exists()


def test_calibrate_refuses_unpaired_or_too_few_lines(run_dir, valid_text, tmp_path, capsys):
    src, ref = valid_text
    short = tmp_path / "short.de"
    short.write_text("".join(ref.read_text().splitlines(keepends=True)[:5]))
    assert main(["calibrate", str(run_dir), "--src", str(src), "--ref", str(short)]) == 2
    err = capsys.readouterr().err
    assert f"--src {src}: 40 lines, --ref {short}: 5" in err and err.count("\n") == 1
    few = tmp_path / "few.en"
    few.write_text("".join(src.read_text().splitlines(keepends=True)[:5]))
    out = tmp_path / "out"
    assert main(["calibrate", str(run_dir), "--src", str(few), "--ref", str(short), "--out", str(out)]) == 2
    assert "at least 20 sentences, got 5" in capsys.readouterr().err
    assert not (out / CALIBRATION).exists()
