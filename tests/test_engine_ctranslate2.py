"""nmt/infer/engine_ctranslate2.py, the ctranslate2 engine of Translator and `nmt translate`: nmt's scores and
length limits, the translate contract, clear errors (optional extra ct2: the tests skip with a message without
ctranslate2)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from nmt.cli import main
from nmt.infer.translate import Translator

# kernel- and precision-sensitive: `make test` runs this file again on the AVX2-only path (conftest)
pytestmark = pytest.mark.numerics


def test_ctranslate2_engine_scores_are_log_probs_over_the_papers_length_penalty(
    trained_tiny_run, tiny_test_lines, tmp_path
):
    """CTranslate2 divides by |Y| ** alpha; the engine returns nmt's score, log p(Y | x) over
    ((5 + |Y|) / 6) ** alpha (|Y| with EOS), as the torch engine does (was: CTranslate2's own)."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained_tiny_run), str(out)]) == 0
    torch_engine = Translator.load(trained_tiny_run, precision="fp32")
    ct2 = Translator.load(out, engine="ctranslate2", precision="fp32")
    lines = tiny_test_lines[:8]
    sources, _ = torch_engine.encode(lines)
    for alpha in (0.6, 1.0):
        for src, [best] in zip(sources, ct2.translate_nbest(lines, beam=4, alpha=alpha)):
            with torch.inference_mode():
                logits = torch_engine.model(torch.tensor([src]), torch.tensor([[2] + best.tokens]))[0]
            target = torch.tensor(best.tokens + [3])  # the output and EOS
            logp = F.log_softmax(logits.float(), dim=-1)[torch.arange(len(target)), target].sum().item()
            assert best.score == pytest.approx(logp / ((5 + len(target)) / 6) ** alpha, rel=1e-4, abs=1e-4)


def test_ctranslate2_engine_holds_each_sentence_to_its_own_length_limit(
    trained_tiny_run, tiny_test_lines, tmp_path
):
    """CTranslate2 decodes a batch up to its longest sentence's limit; each output is held to its own
    sentence's limit a * |x| + b (EOS included) and scored as the tokens returned: log p(Y, EOS | x)
    over ((5 + |Y|) / 6) ** alpha. max_len_b = 0 makes the limits differ within one batch, and the
    tiny model's outputs run into them."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained_tiny_run), str(out)]) == 0
    torch_engine = Translator.load(trained_tiny_run, precision="fp32")
    ct2 = Translator.load(out, engine="ctranslate2", precision="fp32")
    lines = tiny_test_lines[:16]
    sources, _ = torch_engine.encode(lines)
    hyps = ct2.translate_nbest(lines, beam=4, nbest=2, alpha=0.6, max_len_a=0.5, max_len_b=0)
    at_limit = 0
    for src, nbest in zip(sources, hyps):
        limit = max(1, int(0.5 * len(src)))  # |x| counts EOS
        for h in nbest:
            target = h.tokens + [3]  # the output and EOS
            assert len(target) <= limit
            at_limit += len(target) == limit
            with torch.inference_mode():
                logits = torch_engine.model(torch.tensor([src]), torch.tensor([[2] + h.tokens]))[0]
            logp = F.log_softmax(logits.float(), dim=-1)[torch.arange(len(target)), torch.tensor(target)]
            # fp32 log-probs of <= 64 tokens from two engines' kernels: agree to ~1e-5 per token
            assert h.score == pytest.approx(logp.sum().item() / ((5 + len(target)) / 6) ** 0.6, abs=1e-3)
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
    assert at_limit > 0  # the case under test occurred


def test_ctranslate2_engine_keeps_the_translate_contract(trained_tiny_run, tmp_path, capsys):
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    lines = ["a dog runs", "", "   ", " ".join(["the"] * 300), "a \xff cat"]  # 300 pieces > 256 positions
    src = tmp_path / "in.txt"
    src.write_bytes("\n".join(lines[:4]).encode() + b"\n" + b"a \xff cat\n")
    base = [
        "translate",
        str(trained_tiny_run),
        "--engine",
        "ctranslate2",
        "--beam",
        "2",
        "--quiet",
        "--max-len-b",
        "5",
    ]
    assert main([*base, "-i", str(src), "-o", str(tmp_path / "o.txt")]) == 2
    assert "line 5: invalid UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "o.txt").exists()
    # --max-words 0: a long sentence is truncated to the model's positions, not cut into parts
    replace = [
        *base,
        "-i",
        str(src),
        "-o",
        str(tmp_path / "o.txt"),
        "--errors",
        "replace",
        "--max-words",
        "0",
    ]
    assert main(replace) == 0
    out = (tmp_path / "o.txt").read_text(encoding="utf-8").split("\n")
    assert len(out) == len(lines) + 1 and out[-1] == ""
    assert [o == "" for o in out[:-1]] == [line.strip() == "" for line in lines]
    assert "line 4: 300 pieces, truncated to 255" in capsys.readouterr().err


def test_ctranslate2_engine_names_a_missing_or_corrupt_spm_model(trained_tiny_run, tmp_path, capsys):
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    pytest.importorskip("fastapi", reason="fastapi not installed (pip install 'nmt[serve]')")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained_tiny_run), str(out)]) == 0
    src = tmp_path / "in.txt"
    src.write_text("a dog runs\n", encoding="utf-8")
    (out / "spm.model").write_bytes(b"not a SentencePiece model")
    assert main(["translate", str(out), "--engine", "ctranslate2", "-i", str(src), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nmt translate: error: {out / 'spm.model'}: not a readable SentencePiece model")
    (out / "spm.model").unlink()
    assert main(["serve", str(out), "--engine", "ctranslate2"]) == 2
    err = capsys.readouterr().err
    assert f"nmt serve: error: {out / 'spm.model'}: not a readable SentencePiece model" in err


def test_ctranslate2_engine_knows_the_longest_sentences_its_model_learned_from(trained_tiny_run, tiny_data):
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    from nmt.data.dataset import load_meta

    words = load_meta(tiny_data)["splits"]["train"]["src_words"]
    loaded = Translator.load(trained_tiny_run, engine="ctranslate2").source_words
    assert (loaded.longest, loaded.p99) == (words["longest"], words["p99"]) and words["p99"] > 0


def test_ctranslate2_export_and_engine_keep_the_target_sides_model(imported_marian, tmp_path):
    """A checkpoint with its own target_spm.model (an imported Marian model): `nmt export ctranslate2`
    writes it beside spm.model, and the engine decodes with it (``tgt_sp``) as the torch engine does:
    the same texts."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    from import_fixtures import SENTENCES

    _, ckpt = imported_marian
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(ckpt), str(out)]) == 0
    assert (out / "target_spm.model").read_bytes() == (ckpt / "target_spm.model").read_bytes()
    ct2 = Translator.load(out, engine="ctranslate2", precision="fp32")
    assert ct2.tgt_sp.serialized_model_proto() == (ckpt / "target_spm.model").read_bytes()
    torch_engine = Translator.load(ckpt, precision="fp32")
    lines = SENTENCES[:8]
    search = dict(beam=1, alpha=0.0, max_len_a=0.0, max_len_b=12)
    assert ct2.translate_sentences(lines, **search) == torch_engine.translate_sentences(lines, **search)
