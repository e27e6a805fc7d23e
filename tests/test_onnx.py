"""`nmt export onnx` (nmt/export/onnx.py): ONNX Runtime runs the exported encoder, cached
decoder step and full-prefix decoder as nmt's model does, and its greedy translations are nmt's."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from conftest import tol
from serve_fixtures import SENTENCES

from nmt.cli import main

pytest.importorskip("onnx", reason="onnx not installed (pip install 'nmt[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install 'nmt[onnx]')")

pytestmark = pytest.mark.numerics

# three sources of different lengths (PAD-padded), other shapes than the trace's (2, 4)
SOURCES = [[5, 6, 7, 3, 0, 0], [8, 9, 10, 11, 12, 3], [13, 3, 0, 0, 0, 0]]


@pytest.fixture(scope="module")
def onnx_dir(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx") / "en-de"
    assert main(["export", "onnx", str(run_dir), str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def model(run_dir):
    from nmt.checkpoint import load_model, resolve_checkpoint

    model, _ = load_model(resolve_checkpoint(run_dir), device="cpu")
    return model.eval()


def test_onnx_runtime_gives_the_models_log_probs_at_any_batch_and_length(model, onnx_dir):
    from nmt.export.onnx import OnnxTranslator

    ort = OnnxTranslator.load(onnx_dir)
    for src, tgt in (
        ([[5, 6, 7, 9, 10, 3]], [[2]]),  # other shapes than the trace's (2, 4) and (2, 3)
        (SOURCES, [[2, 5, 6, 7, 8]] * 3),
    ):
        src, tgt = torch.tensor(src), torch.tensor(tgt)
        with torch.no_grad():
            memory = model.encode(src)
            want = torch.log_softmax(model.decoder(tgt, memory)[:, -1], dim=-1).numpy()
        got_memory = ort.encoder.run(None, {"src_tokens": src.numpy()})[0]
        got = ort.decoder.run(
            None, {"tgt_tokens": tgt.numpy(), "memory": got_memory, "src_tokens": src.numpy()}
        )[0]
        pad = src.eq(0).numpy()
        np.testing.assert_allclose(got_memory[~pad], memory.out.numpy()[~pad], atol=1e-4)
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_the_cached_step_gives_the_uncached_log_probs_at_every_position(model, onnx_dir):
    """The cached step, fed its own presents as the next past from an empty one, against the
    full-prefix decoder on the same prefix and against nmt's incremental decode_step, at every
    position of a 12-token prefix, for three sources of different lengths."""
    from nmt.export.onnx import OnnxTranslator

    ort = OnnxTranslator.load(onnx_dir)
    src = np.array(SOURCES, dtype=np.int64)  # (3, 6)
    tgt = np.array([[2, *range(5, 16)], [2, *range(20, 31)], [2, *range(40, 51)]], dtype=np.int64)  # (3, 12)
    cached, uncached = ort.cached_steps(src), ort.prefix_steps(src)
    memory, cache = model.encode(torch.from_numpy(src)), None
    cfg = model.cfg
    # the longest chain of roundings behind a log-prob, per decoder layer: self-attention (its q/k/v
    # projection D, scores K, the sum over <= T keys, out projection H*V), encoder-decoder attention
    # (D, K, S, H*V), the FFN (D + F), three LayerNorms (3 D); then the output projection D and the
    # log-sum-exp over W; the encoder's layers (D, K, S, H*V, D + F, 2 D each) behind the memory
    per_layer = (
        6 * cfg.d_model + 2 * cfg.d_k + 2 * cfg.n_heads * cfg.d_v + cfg.d_ff + tgt.shape[1] + src.shape[1]
    )
    n_accum = (cfg.decoder_layers + cfg.encoder_layers) * per_layer + cfg.d_model + cfg.tgt_vocab_size
    for t in range(tgt.shape[1]):
        got = cached(tgt[:, : t + 1])  # (3, W): the token at position t, the past of positions < t
        want = uncached(tgt[:, : t + 1])
        with torch.no_grad():
            logits, cache = model.decode_step(torch.from_numpy(tgt[:, t : t + 1]), memory, cache)  # (3, 1, W)
        nmt_step = torch.log_softmax(logits[:, -1], dim=-1).numpy()
        scale = max(1.0, float(np.abs(want).max()))  # the size of the log-probs compared
        np.testing.assert_allclose(got, want, rtol=0, atol=tol(torch.float32, n_accum, scale=scale))
        np.testing.assert_allclose(got, nmt_step, rtol=0, atol=tol(torch.float32, n_accum, scale=scale))


def test_greedy_translations_with_onnx_runtime_are_nmts(run_dir, onnx_dir):
    from nmt.export.onnx import OnnxTranslator
    from nmt.infer.translate import Translator

    want = Translator.load(run_dir, device="cpu", precision="fp32").translate_sentences(SENTENCES, beam=1)
    ort = OnnxTranslator.load(onnx_dir)
    assert ort.translate(SENTENCES) == want  # the cached step, all sentences in one batch
    assert ort.translate(SENTENCES, cached=False) == want  # the full-prefix decoder
    assert "" in want and len(set(want)) > 5  # an empty line, and translations that differ
    assert len({len(s.split()) for s in SENTENCES}) > 3  # sources of different lengths


def test_an_export_without_the_cached_step_is_refused(onnx_dir, tmp_path):
    from nmt.export.ctranslate2 import ExportError
    from nmt.export.onnx import OnnxTranslator

    old = shutil.copytree(onnx_dir, tmp_path / "old")
    (old / "decoder_step.onnx").unlink()
    with pytest.raises(ExportError, match="no decoder_step.onnx"):
        OnnxTranslator.load(old)


def test_a_restricted_attention_model_is_refused(tiny_data, tmp_path, capsys):
    from serve_fixtures import TRAIN_ARGS

    run = tmp_path / "run"
    args = [a for a in TRAIN_ARGS if not a.startswith("--train.max_steps")]
    assert (
        main(
            [
                "train",
                str(tiny_data),
                "--out",
                str(run),
                *args,
                "--train.max_steps=1",
                "--model.attention_window=2",
            ]
        )
        == 0
    )
    assert main(["export", "onnx", str(run), str(tmp_path / "out")]) == 2
    assert "restricted self-attention" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_export_replaces_an_earlier_one_and_refuses_other_files_and_its_checkpoint(
    run_dir, onnx_dir, tmp_path, capsys
):
    """OUT_DIR as for the other exports: a file, a directory of other files, the checkpoint and the
    run directory holding it are refused with one line, exit 2, and left as they were; an earlier
    ONNX export is replaced whole (a file left in it is gone), no temporary left beside it."""
    from nmt.checkpoint import resolve_checkpoint

    ckpt = resolve_checkpoint(run_dir)
    before = sorted(p.name for p in ckpt.iterdir())
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.txt").write_text("mine\n")
    for out, why in (
        (notes, "exists and is not an nmt export"),
        (other, "exists and is not an nmt export"),
        (ckpt, f"is the checkpoint {ckpt} or a directory holding it"),
        (run_dir, f"is the checkpoint {ckpt} or a directory holding it"),
    ):
        assert main(["export", "onnx", str(run_dir), str(out)]) == 2
        assert capsys.readouterr().err == f"nmt export: error: OUT_DIR {out}: {why}; choose a new directory\n"
    assert notes.read_text() == "mine\n" and [p.name for p in other.iterdir()] == ["data.txt"]
    assert sorted(p.name for p in ckpt.iterdir()) == before
    earlier = shutil.copytree(onnx_dir, tmp_path / "earlier")
    (earlier / "stale.onnx").write_bytes(b"an earlier export's file")
    assert main(["export", "onnx", str(run_dir), str(earlier)]) == 0
    assert sorted(p.name for p in earlier.iterdir()) == sorted(p.name for p in onnx_dir.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier", "notes.txt", "other"]
