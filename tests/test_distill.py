"""`nmt distill` (nmt.train.distill, nmt.train.distill_command) end to end on a tiny teacher: the six
stages, their outputs, and a rerun that resumes where the run stopped and never redoes a finished
chunk or stage."""

from __future__ import annotations

import json
import shutil

import pytest

from nmt.checkpoint import read_config, resolve_checkpoint
from nmt.cli import main
from nmt.config import preset
from nmt.infer.translate import Translator

# the student-tiny preset's depths (6 encoder layers, 1 decoder layer) at a test's width and budget
STUDENT = [
    "--preset",
    "student-tiny",
    "--chunk-sentences",
    "250",
    "--teacher-precision",
    "fp32",
    "--average-last",
    "3",
    "--model.d_model=32",
    "--model.d_ff=32",
    "--model.n_heads=2",
    "--model.d_k=16",
    "--model.d_v=16",
    "--model.n_encoder_layers=3",
    "--model.max_positions=256",
    "--train.precision=fp32",
    "--train.max_time=0",
    "--train.max_steps=12",
    "--train.save_every_steps=4",
    "--train.valid_every_steps=0",
    "--train.valid_bleu=false",
    "--train.best_metric=loss",
    "--train.warmup_steps=4",
    "--train.num_threads=1",
    "--train.log_every_steps=1000",
]


@pytest.fixture(scope="module")
def teacher(trained_tiny_run, tmp_path_factory):
    """The tiny model of 200 updates the suite trains once (conftest's trained_tiny_run), copied: the
    tests distill it, and none may change the suite's."""
    run = tmp_path_factory.mktemp("teacher") / "run"
    shutil.copytree(trained_tiny_run, run)
    return run


@pytest.fixture(scope="module")
def distilled(teacher, tmp_path_factory):
    """One whole `nmt distill` of the teacher's own training data (600 pairs: 3 chunks)."""
    out = tmp_path_factory.mktemp("distill") / "out"
    assert main(["distill", str(teacher), "--out", str(out), *STUDENT]) == 0
    return out


def test_distill_writes_the_teachers_translations_the_students_data_and_its_average(
    teacher, distilled, tiny_data
):
    sources = (tiny_data.parent / "text" / "train.en").read_text().splitlines()
    lines = (distilled / "train.distilled.de").read_text().splitlines()
    assert len(lines) == len(sources) == 600 and len(set(lines)) > 100
    # a sharded job (nmt.bulk) of 3 shards of --chunk-sentences lines, assembled
    assert sorted(p.name for p in (distilled / "distilled" / "shards").glob("*.out")) == [
        "00000.out",
        "00001.out",
        "00002.out",
    ]
    manifest = json.loads((distilled / "distilled" / "manifest.json").read_text())
    assert manifest["identity"]["options"]["split"] is False and manifest["output"]["lines"] == 600
    # the teacher's beam-4 translations, line for line
    expected = Translator.load(teacher, precision="fp32").translate_sentences(sources[:5], beam=4, alpha=0.6)
    assert lines[:5] == expected
    # the student's data: the teacher's vocabulary, the original pairs and the distilled ones
    ckpt = resolve_checkpoint(teacher)
    assert (distilled / "data" / "spm.model").read_bytes() == (ckpt / "spm.model").read_bytes()
    meta = json.loads((distilled / "data" / "meta.json").read_text())
    assert meta["cleaning"]["train"]["read"] == 1200
    assert meta["splits"]["valid"]["pairs"] == meta["splits"]["test"]["pairs"] == 40
    # the student: the preset's decoder depth, its own encoder depth, 3 checkpoints averaged
    model = read_config(distilled / "average")["model"]
    assert (model["n_encoder_layers"], model["n_decoder_layers"]) == (3, 1)
    assert preset("student-tiny").n_decoder_layers == 1
    assert read_config(distilled / "average")["averaged_from"] == [f"step_{n:08d}" for n in (4, 8, 12)]


def test_a_rerun_of_a_finished_distillation_redoes_nothing(teacher, distilled, monkeypatch, capsys):
    def refuse(*args, **kwargs):
        raise AssertionError("a finished distillation loaded its teacher again")

    monkeypatch.setattr(Translator, "load", refuse)
    before = {p: p.stat().st_mtime_ns for p in distilled.rglob("*") if p.is_file()}
    assert main(["distill", str(teacher), "--out", str(distilled), *STUDENT]) == 0
    out = capsys.readouterr().out
    assert out.count("(skipped)") == 6, out
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_an_interrupted_distillation_translates_only_the_shards_not_finished(teacher, tmp_path, monkeypatch):
    out = tmp_path / "out"
    translated = []
    real = Translator.translate_nbest

    def interrupted_after_one_chunk(self, lines, *args, **kwargs):
        if translated:
            raise KeyboardInterrupt
        translated.append(lines[0])
        return real(self, lines, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_nbest", interrupted_after_one_chunk)
    greedy = ["--beam", "1"]  # faster; what is resumed does not depend on the beam
    assert main(["distill", str(teacher), "--out", str(out), *STUDENT, *greedy]) == 130
    first = out / "distilled" / "shards" / "00000.out"
    assert [p.name for p in (out / "distilled" / "shards").glob("*.done")] == ["00000.done"]
    written = first.stat().st_mtime_ns

    def counted(self, lines, *args, **kwargs):
        translated.append(lines[0])
        return real(self, lines, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate_nbest", counted)
    assert main(["distill", str(teacher), "--out", str(out), *STUDENT, *greedy]) == 0
    assert len((out / "train.distilled.de").read_text().splitlines()) == 600
    # chunk 1 once, then chunks 2 and 3 only; then the student's validation pairs (stage 6)
    assert len(translated) == 4
    assert first.stat().st_mtime_ns == written
    assert (out / "average" / "MANIFEST.json").exists()


def test_a_rerun_with_other_settings_is_refused_naming_the_setting(teacher, distilled, capsys):
    assert main(["distill", str(teacher), "--out", str(distilled), *STUDENT, "--beam", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nmt distill: error: {distilled / 'distill.json'}: this run was made with beam=4")
    assert err.count("\n") == 1


def test_distilled_only_trains_on_the_teachers_translations_alone(teacher, distilled, tmp_path):
    from nmt.train.distill import DistillOptions, student_data, teacher_corpus

    ckpt = resolve_checkpoint(teacher)
    options = DistillOptions(teachers=(str(teacher),), out=str(tmp_path), distilled_only=True, threads=1)
    corpus = teacher_corpus(ckpt, {}, langs=(None, None))
    data = student_data(options, corpus, distilled / "train.distilled.de", ckpt, log=lambda *a: None)
    meta = json.loads((data / "meta.json").read_text())
    assert meta["cleaning"]["train"]["read"] == 600
    assert not list(tmp_path.glob(".train.*"))  # the joined files are removed once prepared


def test_a_teacher_without_recorded_training_files_needs_train(tiny_checkpoint, tmp_path, capsys):
    assert main(["distill", str(tiny_checkpoint), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "records no training files of the teacher: give --train SRC TGT" in err


def test_the_student_preset_is_the_default_unless_a_config_file_names_its_own():
    from nmt.cli import build_parser
    from nmt.train.distill_command import distill_options

    def preset_of(*extra):
        return distill_options(build_parser().parse_args(["distill", "t", "--out", "o", *extra])).preset

    assert preset_of() == "student"
    assert preset_of("--config", "c.yaml") is None  # the file's preset:, as `nmt train --config`
    assert preset_of("--config", "c.yaml", "--preset", "student-tiny") == "student-tiny"


def test_shrink_starts_the_student_from_the_teachers_weights_its_first_decoder_layer_and_d_ff(
    teacher, distilled, tmp_path
):
    """--shrink --model.n_decoder_layers=1 --model.d_ff=32: the student-init is the teacher's
    encoder, its first decoder layer, every feed-forward network cut to the 32 units shrink keeps
    (nmt.train.shrink.ffn_units), all else the teacher's; the student trains with that shape."""
    import shutil

    import torch

    from nmt.checkpoint import load_model
    from nmt.train.shrink import ffn_units

    out = tmp_path / "shrunk"
    out.mkdir()
    for name in ("distill.json", "train.distilled.de", "data"):  # stages 1-2 done: copied
        (shutil.copytree if (distilled / name).is_dir() else shutil.copy)(distilled / name, out / name)
    budget = ["--train.max_steps=4", "--train.save_every_steps=2", "--train.valid_every_steps=0"]
    budget += ["--train.valid_bleu=false", "--train.best_metric=loss", "--train.max_time=0"]
    argv = ["distill", str(teacher), "--out", str(out), "--shrink", "--model.n_decoder_layers=1"]
    assert main([*argv, "--model.d_ff=32", "--chunk-sentences", "250", "--average-last", "2", *budget]) == 0
    t, _ = load_model(teacher)
    init, config = load_model(out / "student-init")
    assert (init.cfg.encoder_layers, init.cfg.decoder_layers, init.cfg.d_ff) == (t.cfg.encoder_layers, 1, 32)
    assert t.cfg.d_ff > 32 and config["shrunk_from"]["decoder_layers"] == [0]
    teacher_state = t.state_dict()
    for name, value in init.state_dict().items():  # every weight the teacher's (layer 0 of its decoder)
        want = teacher_state[name]
        if ".fc1." in name or name.endswith("fc2.weight"):
            layer = name.rsplit(".", 2)[0]
            keep = ffn_units(teacher_state[f"{layer}.fc1.weight"], teacher_state[f"{layer}.fc2.weight"], 32)
            want = want[:, keep] if name.endswith("fc2.weight") else want[keep]
        assert torch.equal(value, want), name
    student = read_config(resolve_checkpoint(out / "student"))
    assert student["init"]["sha256"] and student["model"]["n_decoder_layers"] == 1
    assert student["model"]["d_ff"] == 32
    assert Translator.load(out / "average").model.cfg.decoder_layers == 1


def test_the_student_gets_a_shortlist_of_its_own_data_and_searches_with_it_by_default(
    teacher, distilled, capsys
):
    from nmt.infer import shortlist

    path = distilled / "average" / "shortlist.txt"
    listed = shortlist.load(path)
    meta = json.loads((distilled / "data" / "meta.json").read_text())
    # of the student's data (the original and the teacher's pairs), and of the student's vocabulary
    assert listed.info["data"] == str(distilled / "data")
    assert listed.info["sentences"] == meta["splits"]["train"]["pairs"] > 600
    student = Translator.load(distilled / "average", precision="fp32")
    full = Translator.load(distilled / "average", precision="fp32", shortlist=False)
    assert student.shortlist == listed and full.shortlist is None
    assert main(["distill", str(teacher), "--out", str(distilled), *STUDENT]) == 0
    assert f"--beam 4  # searches with its shortlist {path}; --no-shortlist" in capsys.readouterr().out


def test_the_student_is_calibrated_on_its_datas_validation_pairs(distilled):
    """Stage 6: confidence.json beside the student's weights, fitted on the data's valid split with
    beam 4 as the student searches by default; the student's translations then carry it."""
    from nmt.infer.confidence import Calibration

    calibration = Calibration.load(distilled / "average")
    fitted = calibration.fitted_on
    assert (fitted["src"], fitted["ref"], fitted["beam"], fitted["alpha"]) == (
        "valid.en.txt",
        "valid.de.txt",
        4,
        0.6,
    )
    assert 0 < fitted["sentences"] <= 40 and "spearman" in fitted
    assert Translator.load(distilled / "average", precision="fp32").calibration == calibration


def test_no_shortlist_writes_none(teacher, distilled, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(distilled, out)
    (out / "average" / "shortlist.txt").unlink()
    assert main(["distill", str(teacher), "--out", str(out), *STUDENT, "--no-shortlist"]) == 0
    assert not (out / "average" / "shortlist.txt").exists()
    assert "searches with its shortlist" not in capsys.readouterr().out
