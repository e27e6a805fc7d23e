"""`nmt export` (nmt/export/command.py) across formats: models an export cannot hold refused, OUT_DIR
never replaced unless it is an export, a student's depths kept (optional extras ct2, hf: the tests skip
with a message without them)."""

from __future__ import annotations

import importlib.util

import pytest
from export_fixtures import random_checkpoint
from train_fixtures import tiny_args

from nmt.checkpoint import load_model
from nmt.cli import main
from nmt.infer.translate import Translator

# kernel- and precision-sensitive: `make test` runs this file again on the AVX2-only path (conftest)
pytestmark = pytest.mark.numerics


TINY = tiny_args("--train.log_every_steps=1000")


def test_export_errors(trained_tiny_run, tmp_path, capsys):
    pytest.importorskip("transformers", reason="transformers not installed (pip install 'nmt[hf]')")
    ckpt = random_checkpoint(tmp_path, trained_tiny_run, norm_position="pre")
    assert main(["export", "huggingface", str(ckpt), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt export: error: HF Marian is post-norm") and err.count("\n") == 1
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf.tmp-*"))
    assert main(["export", "ctranslate2", str(tmp_path / "nope"), str(tmp_path / "c")]) == 2
    assert "not a checkpoint directory" in capsys.readouterr().err


def test_exports_refuse_restricted_self_attention(trained_tiny_run, tmp_path, capsys):
    """Neither CTranslate2 nor HF Marian has a restricted self-attention window (section 4,
    model.attention_window): such a model is refused with one line, not exported with full attention
    (its outputs would differ from nmt's without a word)."""
    ckpt = random_checkpoint(tmp_path, trained_tiny_run, attention_window=1)
    formats = [
        (f, m)
        for f, m in (("ctranslate2", "ctranslate2"), ("huggingface", "transformers"))
        if importlib.util.find_spec(m) is not None
    ]
    if not formats:
        pytest.skip("neither ctranslate2 nor transformers installed (pip install 'nmt[ct2,hf]')")
    for fmt, _ in formats:
        assert main(["export", fmt, str(ckpt), str(tmp_path / fmt)]) == 2
        err = capsys.readouterr().err
        assert "restricted self-attention (model.attention_window=1)" in err and err.count("\n") == 1, err
        assert not (tmp_path / fmt).exists() and not list(tmp_path.glob(f".{fmt}.tmp-*"))


def test_export_never_replaces_its_checkpoint_a_file_or_a_directory_that_is_not_an_export(
    trained_tiny_run, tmp_path, capsys
):
    """OUT_DIR is replaced only when it is an empty directory or an earlier nmt export; the checkpoint
    itself, the run directory holding it, a file and a directory of other files are refused with
    one line and left as they were (were: deleted and replaced by the export without a word)."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    from nmt.checkpoint import resolve_checkpoint

    ckpt = resolve_checkpoint(trained_tiny_run)
    before = sorted(p.name for p in ckpt.iterdir())
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.txt").write_text("mine\n")
    for out, why in (
        (ckpt, f"is the checkpoint {ckpt} or a directory holding it"),
        (trained_tiny_run, f"is the checkpoint {ckpt} or a directory holding it"),
        (ckpt / "sub", f"is inside the checkpoint {ckpt}"),
        (notes, "exists and is not an nmt export"),
        (other, "exists and is not an nmt export"),
    ):
        for fmt in ("ctranslate2", "huggingface")[
            : 1 + (importlib.util.find_spec("transformers") is not None)
        ]:
            assert main(["export", fmt, str(trained_tiny_run), str(out)]) == 2
            err = capsys.readouterr().err
            assert err == f"nmt export: error: OUT_DIR {out}: {why}; choose a new directory\n"
    assert sorted(p.name for p in ckpt.iterdir()) == before and load_model(ckpt)
    assert notes.read_text() == "mine\n" and [p.name for p in other.iterdir()] == ["data.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", "ctranslate2", str(trained_tiny_run), str(empty)]) == 0
    assert main(["export", "ctranslate2", str(trained_tiny_run), str(empty), "--quantization", "int8"]) == 0
    assert '"quantization": "int8"' in (empty / "nmt_export.json").read_text()


def test_a_student_exports_with_its_own_depths_and_decodes_in_int8_in_both_engines(
    tiny_data, tiny_test_lines, tmp_path
):
    """A distilled student's shape (`nmt distill`'s presets: a deeper encoder than decoder; 3 and 1
    layers here), trained: nmt int8 and a CTranslate2 int8 export keep both depths and translate like
    float32 (chrF >= 50 against the float32 outputs: shuffled lines score ~40), and the Hugging Face
    export has the two depths and nmt's greedy outputs."""
    import sacrebleu

    run = tmp_path / "student"
    depths = ["--model.n_encoder_layers=3", "--model.n_decoder_layers=1"]
    budget = [
        "--train.max_steps=200",
        "--train.max_tokens=1024",
        "--train.accum_steps=1",
        "--train.lr_scale=0.3",
    ]
    assert main(["train", str(tiny_data), "--out", str(run), *TINY, *depths, *budget]) == 0
    fp32 = Translator.load(run, precision="fp32").translate_sentences(tiny_test_lines, beam=1, alpha=0.0)
    assert len(set(fp32)) > 10
    int8 = Translator.load(run, precision="int8")
    assert (len(int8.model.encoder.layers), len(int8.model.decoder.layers)) == (3, 1)
    nmt_int8 = int8.translate_sentences(tiny_test_lines, beam=4)
    assert (
        all(nmt_int8)
        and sacrebleu.corpus_chrf(int8.translate_sentences(tiny_test_lines, beam=1, alpha=0.0), [fp32]).score
        >= 50
    )
    if importlib.util.find_spec("ctranslate2") is not None:
        import ctranslate2

        out = tmp_path / "ct2-int8"
        assert main(["export", "ctranslate2", str(run), str(out), "--quantization", "int8"]) == 0
        weights = (out / "model.bin").read_bytes()
        assert b"encoder/layer_2/" in weights and b"encoder/layer_3/" not in weights
        assert b"decoder/layer_0/" in weights and b"decoder/layer_1/" not in weights
        assert ctranslate2.Translator(str(out), device="cpu").compute_type.startswith("int8")
        ct2 = Translator.load(out, engine="ctranslate2")
        assert all(ct2.translate_sentences(tiny_test_lines, beam=4))
        ct2_greedy = ct2.translate_sentences(tiny_test_lines, beam=1, alpha=0.0)
        assert sacrebleu.corpus_chrf(ct2_greedy, [fp32]).score >= 50
    if importlib.util.find_spec("transformers") is not None:
        from transformers import MarianConfig, pipeline

        out = tmp_path / "hf"
        assert main(["export", "huggingface", str(run), str(out)]) == 0
        config = MarianConfig.from_pretrained(out)
        assert (config.encoder_layers, config.decoder_layers) == (3, 1)
        pipe = pipeline("translation", model=str(out))
        translator = Translator.load(run, precision="fp32")
        for line in tiny_test_lines[:10]:
            expected = translator.translate_sentences([line], beam=1, alpha=0.0, max_len_b=10)[0]
            n = len(translator.encode([line])[0][0]) + 10
            assert pipe(line, num_beams=1, max_new_tokens=n)[0]["translation_text"] == expected
