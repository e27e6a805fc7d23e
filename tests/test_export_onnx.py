"""`nmt export onnx` (nmt/infer/export_onnx.py): ONNX Runtime runs the exported encoder and decoder
as nmt's model does, and its greedy translations are nmt's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from serve_fixtures import SENTENCES

from nmt.cli import main

pytest.importorskip("onnx", reason="onnx not installed (pip install 'nmt[onnx]')")
pytest.importorskip("onnxruntime", reason="onnxruntime not installed (pip install 'nmt[onnx]')")

pytestmark = pytest.mark.numerics


@pytest.fixture(scope="module")
def onnx_dir(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx") / "en-de"
    assert main(["export", "onnx", str(run_dir), str(out)]) == 0
    return out


def test_onnx_runtime_gives_the_models_log_probs_at_any_batch_and_length(run_dir, onnx_dir):
    from nmt.checkpoint import load_model, resolve_checkpoint
    from nmt.infer.export_onnx import OnnxTranslator

    model, _ = load_model(resolve_checkpoint(run_dir), device="cpu")
    model.eval()
    ort = OnnxTranslator.load(onnx_dir)
    for src, tgt in (
        ([[5, 6, 7, 9, 10, 3]], [[2]]),  # other shapes than the trace's (2, 4) and (2, 3)
        ([[5, 6, 7, 3, 0, 0], [8, 9, 10, 11, 12, 3], [13, 3, 0, 0, 0, 0]], [[2, 5, 6, 7, 8]] * 3),
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


def test_greedy_translations_with_onnx_runtime_are_nmts(run_dir, onnx_dir):
    from nmt.infer.export_onnx import OnnxTranslator
    from nmt.infer.translate import Translator

    want = Translator.load(run_dir, device="cpu", precision="fp32").translate(SENTENCES, beam=1)
    assert OnnxTranslator.load(onnx_dir).translate(SENTENCES) == want
    assert "" in want and len(set(want)) > 5  # an empty line, and translations that differ


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
    assert main(["export", "onnx", str(run), str(tmp_path / "out")]) != 0
    assert "restricted self-attention" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
