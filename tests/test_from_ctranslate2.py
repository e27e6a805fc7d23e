"""`nmt import ctranslate2` (nmt/imports/from_ctranslate2.py): nmt's own exports come back with identical
weights (post-norm; pre-norm with SiLU, an output bias and separate tables), a model converted by
CTranslate2's own transformers converter translates as CTranslate2 and transformers do, and a
truncated model.bin is one error line, exit 2, nothing written."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from export_fixtures import random_checkpoint
from import_fixtures import SENTENCES, hf_pieces, make_marian

from nmt.checkpoint import load_model, load_state
from nmt.cli import main
from nmt.imports.from_ctranslate2 import import_ctranslate2
from nmt.infer.translate import Translator

pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
pytestmark = pytest.mark.numerics


def same_weights(a, b) -> bool:
    sa, sb = load_state(a), load_state(b)
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"norm_position": "pre", "activation": "silu", "output_bias": True, "tie_output": False},
        {"share_embeddings": False, "scale_embeddings": False, "n_encoder_layers": 3, "n_decoder_layers": 1},
    ],
)
def test_export_then_import_gives_identical_weights(tiny_checkpoint, tmp_path, changes):
    src = random_checkpoint(tmp_path, tiny_checkpoint, **changes)
    if changes.get("output_bias"):  # a non-zero bias to carry
        model, config = load_model(src)
        with torch.no_grad():
            model.decoder.output_projection.bias.normal_()
        from nmt.checkpoint import save

        save(src, model=model, config=config, spm_model=tiny_checkpoint / "spm.model")
    assert main(["export", "ctranslate2", str(src), str(tmp_path / "ct2")]) == 0
    assert main(["import", "ctranslate2", str(tmp_path / "ct2"), str(tmp_path / "back")]) == 0
    assert same_weights(src, tmp_path / "back")
    before, _ = load_model(src)
    after, _ = load_model(tmp_path / "back")
    # the same configuration (N itself is free where both depths are given)
    assert (after.cfg.encoder_layers, after.cfg.decoder_layers) == (
        before.cfg.encoder_layers,
        before.cfg.decoder_layers,
    )
    assert dataclasses.replace(after.cfg, n_layers=0) == dataclasses.replace(before.cfg, n_layers=0)


def test_converted_by_ctranslate2_translates_as_ctranslate2_and_transformers(tmp_path):
    """CTranslate2's converter writes Marian's decoder start as a zero vector, its [sin | cos] table
    explicitly (imported as a learned table) and no source EOS (its users give the tokenizer's </s>:
    --source-eos yes). CTranslate2 never ends an output at its first step: all three search with at
    least one piece."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter
    from transformers import MarianTokenizer

    hf = make_marian(tmp_path / "hf", eos_bias=3.0)  # beam outputs of 1 to 15 pieces
    TransformersConverter(str(hf)).convert(str(tmp_path / "ct2"))
    import_ctranslate2(tmp_path / "ct2", tmp_path / "ckpt", spm_model=hf / "source.spm", source_eos=True)
    nmt = Translator.load(tmp_path / "ckpt", precision="fp32")
    assert nmt.model.cfg.positional == "learned"
    tok, ct2 = MarianTokenizer.from_pretrained(hf), ctranslate2.Translator(str(tmp_path / "ct2"))
    lines = SENTENCES[:24]
    sources = [tok.convert_ids_to_tokens(tok(line)["input_ids"]) for line in lines]
    for beam in (1, 4):
        ours = nmt.translate_nbest(lines, beam=beam, alpha=0.0, max_len_a=0.0, max_len_b=16, min_len=2)
        ours = [[nmt.sp.id_to_piece(i) for i in r[0].tokens] for r in ours]
        assert ours == hf_pieces(hf, lines, max_len=16, num_beams=beam, length_penalty=0.0, min_new_tokens=1)
        # CTranslate2 stops at its limit without EOS (15 pieces where nmt's 16th token is EOS), and a
        # beam hypothesis cut there is scored without EOS's log-probability: beam search is compared
        # on the lines that end before the limit on both sides (17 of 24 here)
        theirs = ct2.translate_batch(sources, beam_size=beam, length_penalty=0.0, max_decoding_length=15)
        theirs = [r.hypotheses[0] for r in theirs]
        ended = [i for i, (a, b) in enumerate(zip(ours, theirs)) if max(len(a), len(b)) < 15]
        assert [ours[i] for i in ended] == [theirs[i] for i in ended]
        assert beam == 4 or ours == theirs
        assert beam == 1 or len(ended) >= 12


def test_truncated_model_bin_is_one_error_line_and_writes_nothing(tiny_checkpoint, tmp_path, capsys):
    assert main(["export", "ctranslate2", str(tiny_checkpoint), str(tmp_path / "ct2")]) == 0
    model_bin = tmp_path / "ct2" / "model.bin"
    model_bin.write_bytes(model_bin.read_bytes()[:5000])
    assert main(["import", "ctranslate2", str(tmp_path / "ct2"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.bin: truncated or not a CTranslate2 model" in err, err
    assert "at byte" in err and not (tmp_path / "out").exists()
