"""CTranslate2's model.bin read directly (nmt/imports/model_bin.py): the variables CTranslate2 wrote,
aliases resolved, int8 weights dequantized, and malformed files refused naming where they end."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from nmt.imports.imported import ModelImportError
from nmt.imports.model_bin import read_model_bin

pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")


@pytest.fixture(scope="module")
def exported(tiny_checkpoint, tmp_path_factory):
    from nmt.cli import main

    out = tmp_path_factory.mktemp("ct2")
    for q in ("float32", "int8"):
        extra = [] if q == "float32" else ["--quantization", "int8"]
        assert main(["export", "ctranslate2", str(tiny_checkpoint), str(out / q), *extra]) == 0
    return out


def test_reads_the_variables_ctranslate2_wrote(exported, tiny_checkpoint):
    from nmt.checkpoint import load_model

    m = read_model_bin(exported / "float32" / "model.bin")
    model, _ = load_model(tiny_checkpoint)
    assert (m.version, m.spec) == (6, "TransformerSpec")
    assert m.scalar("encoder/num_heads") == 4 and m.scalar("encoder/pre_norm") == 0
    emb = model.encoder.embed_tokens.weight.detach()
    assert torch.equal(m.variables["decoder/embeddings/weight"], emb)
    assert torch.equal(m.variables["encoder/embeddings_0/weight"], emb)  # an alias of the same table
    q = model.encoder.layers[0].self_attn.q_proj.weight.detach()
    assert torch.equal(m.variables["encoder/layer_0/self_attention/linear_0/weight"][:64], q)
    # int8: per-row scales, read back within half a quantization step of each row
    m8 = read_model_bin(exported / "int8" / "model.bin")
    w, w8 = (
        m.variables["encoder/layer_0/ffn/linear_0/weight"],
        m8.variables["encoder/layer_0/ffn/linear_0/weight"],
    )
    step = w.abs().amax(dim=1, keepdim=True) / 127
    assert w8.dtype == torch.float32 and ((w8 - w).abs() <= step / 2 + 1e-7).all()
    assert not any(k.endswith("_scale") for k in m8.variables)


def test_malformed_files_are_refused_naming_the_file(exported, tmp_path):
    data = (exported / "float32" / "model.bin").read_bytes()
    cases = {
        "empty": (b"", "reading the binary version"),
        "newer": (struct.pack("<I", 7) + data[4:], "binary version 7"),
        "cut": (data[:-3], "truncated or not a CTranslate2 model"),
        "tail": (data + b"\0\0", "2 bytes after the last variable"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(content)
        with pytest.raises(ModelImportError, match=message) as e:
            read_model_bin(path)
        assert str(path) in str(e.value)


def test_version_3_item_sizes_and_quantized_int16():
    """The format before dtype ids (binary version 3: item sizes), written by hand."""
    import tempfile
    from pathlib import Path

    def string(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    w = np.array([[100, -200]], dtype=np.int16)
    blob = struct.pack("<I", 3) + string("TransformerBase") + struct.pack("<I", 1) + struct.pack("<I", 2)
    blob += string("w") + struct.pack("<BII", 2, 1, 2) + struct.pack("<BI", 2, 2) + w.tobytes()
    blob += string("w_scale") + struct.pack("<B", 0) + struct.pack("<BI", 4, 1) + np.float32(100).tobytes()
    blob += struct.pack("<I", 1) + string("v") + string("w")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.bin"
        path.write_bytes(blob)
        m = read_model_bin(path)
    assert m.spec == "TransformerBase" and set(m.variables) == {"w", "v"}
    assert torch.equal(m.variables["v"], torch.tensor([[1.0, -2.0]]))
