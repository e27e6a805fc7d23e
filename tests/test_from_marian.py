"""`nmt import huggingface` (nmt/imports/from_marian.py): a transformers MarianMTModel built here (random
weights, SentencePiece models trained on the tiny corpus, MarianTokenizer: import_fixtures) imported;
nmt's greedy and beam-4 outputs are transformers' generate's, token for token, and malformed
directories are one error line, exit 2, nothing written.

The length penalties differ by design (nmt: GNMT's ((5 + |Y|) / 6) ** alpha; transformers: |Y| ** alpha),
so beam search is compared at alpha 0, where both are 1; lengths are matched with EOS forced at the
limit on both sides (nmt's rule; transformers' forced_eos_token_id)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from import_fixtures import SENTENCES, hf_pieces

from nmt.checkpoint import load_model, load_state
from nmt.cli import main
from nmt.imports.from_marian import import_huggingface
from nmt.infer.translate import Translator

pytest.importorskip("transformers", reason="transformers not installed (pip install 'nmt[hf]')")
pytestmark = pytest.mark.numerics  # kernel-sensitive: `make test` runs it again on the AVX2-only path

LINES = SENTENCES[:24]
MAX_LEN = 16  # |Y| with EOS; the random model's outputs either end at once or run to this limit


@pytest.mark.parametrize("beam", [1, 4])
def test_imported_marian_translates_token_for_token_as_transformers(imported_marian, beam):
    hf, ckpt = imported_marian
    nmt = Translator.load(ckpt, precision="fp32")
    ours = nmt.translate_nbest(LINES, beam=beam, alpha=0.0, max_len_a=0.0, max_len_b=MAX_LEN)
    ours = [[nmt.sp.id_to_piece(i) for i in r[0].tokens] for r in ours]
    theirs = hf_pieces(hf, LINES, max_len=MAX_LEN, num_beams=beam, length_penalty=0.0)
    assert ours == theirs
    lengths = {len(p) for p in ours}
    assert 0 in lengths and MAX_LEN - 1 in lengths  # outputs that end at once, others at the limit


def test_imported_marian_reads_sources_as_marian_tokenizer_does(imported_marian):
    from transformers import MarianTokenizer

    hf, ckpt = imported_marian
    tok, nmt = MarianTokenizer.from_pretrained(hf), Translator.load(ckpt, precision="fp32")
    for line in LINES:
        ours = [nmt.sp.id_to_piece(i) for i in nmt.encode([line])[0][0]]
        assert ours == tok.convert_ids_to_tokens(tok([line])["input_ids"][0])
    model, config = load_model(ckpt)
    cfg = model.cfg
    assert (cfg.activation, cfg.output_bias, cfg.scale_embeddings, cfg.depth()) == (
        "silu",
        True,
        True,
        "N=2/1",
    )
    assert config["data"] == {"src_lang": "en", "tgt_lang": "de"}
    # Marian's padding is its decoder start: nmt's BOS row; nmt's PAD a zero row never chosen
    assert model.decoder.embed_tokens.weight[0].abs().max() == 0
    assert model.decoder.output_bias[0] == -100.0


def test_pytorch_weights_file_imports_the_same_weights(imported_marian, tmp_path):
    from safetensors.torch import load_file

    hf, ckpt = imported_marian
    bin_dir = tmp_path / "bin"
    shutil.copytree(hf, bin_dir)
    torch.save(load_file(str(bin_dir / "model.safetensors")), bin_dir / "pytorch_model.bin")
    (bin_dir / "model.safetensors").unlink()
    assert main(["import", "huggingface", str(bin_dir), str(tmp_path / "out")]) == 0
    a, b = load_state(ckpt), load_state(tmp_path / "out")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _broken(hf, tmp_path, what: str):
    bad = tmp_path / what
    shutil.copytree(hf, bad)
    if what == "missing_spm":
        (bad / "target.spm").unlink()
    elif what == "truncated_target_spm":
        data = (bad / "target.spm").read_bytes()
        (bad / "target.spm").write_bytes(data[: len(data) // 2])
    elif what == "empty_target_spm":
        (bad / "target.spm").write_bytes(b"")
    elif what == "vocab_mismatch":
        vocab = json.loads((bad / "vocab.json").read_text())
        del vocab[next(p for p in vocab if p.startswith("▁"))]
        (bad / "vocab.json").write_text(json.dumps(vocab))
    elif what == "unknown_activation":
        config = json.loads((bad / "config.json").read_text())
        (bad / "config.json").write_text(json.dumps({**config, "activation_function": "gelu_new"}))
    elif what == "pre_norm":
        config = json.loads((bad / "config.json").read_text())
        (bad / "config.json").write_text(json.dumps({**config, "normalize_before": True}))
    elif what == "pickled_object":
        torch.save({"model.shared.weight": torch.zeros(2), "x": object()}, bad / "pytorch_model.bin")
        (bad / "model.safetensors").unlink()
    return bad


@pytest.mark.parametrize(
    "what,message",
    [
        ("missing_spm", "target.spm: missing"),
        ("truncated_target_spm", "target.spm: not a readable SentencePiece model"),
        ("empty_target_spm", "target.spm: not a SentencePiece model (no pieces)"),
        ("vocab_mismatch", "vocab.json: 66 pieces, but the weights have 67 embedding rows"),
        ("unknown_activation", "activation_function 'gelu_new' is not one of"),
        ("pre_norm", "normalize_before is true"),
        ("pickled_object", "pytorch_model.bin: not a file of tensors"),
    ],
)
def test_malformed_marian_is_one_error_line_and_writes_nothing(
    imported_marian, tmp_path, capsys, what, message
):
    bad = _broken(imported_marian[0], tmp_path, what)
    assert main(["import", "huggingface", str(bad), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [what]  # no temporaries left either


def test_nmt_export_imported_back_has_the_same_weights(tiny_checkpoint, tmp_path):
    """nmt -> `nmt export huggingface` -> `nmt import huggingface`: every weight as it was (the model
    dimension permuted there and back), plus Marian's final_logits_bias, zero (the recipe's
    round trip, the stand-in for a downloaded model)."""
    assert main(["export", "huggingface", str(tiny_checkpoint), str(tmp_path / "hf")]) == 0
    import_huggingface(str(tmp_path / "hf"), tmp_path / "back")
    a, b = load_state(tiny_checkpoint), load_state(tmp_path / "back")
    assert set(b) - set(a) == {"decoder.output_bias"} and not b["decoder.output_bias"].any()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "back" / "spm.model").read_bytes() != b"" and "target_spm.model" not in {
        p.name for p in (tmp_path / "back").iterdir()
    }
