"""Exports to CTranslate2 and Hugging Face Marian, and the ctranslate2 engine (optional extras:
the tests skip with a message when ctranslate2 / transformers are not installed)."""

from __future__ import annotations

import dataclasses
import importlib.util
import random

import pytest
import torch
import torch.nn.functional as F
from conftest import tol
from train_fixtures import tiny_args

from nmt.checkpoint import load_model, save
from nmt.cli import main
from nmt.config import tiny
from nmt.infer.translate import Translator
from nmt.model import Transformer

# kernel- and precision-sensitive: `make test` runs this file again on the AVX2-only path (conftest)
pytestmark = pytest.mark.numerics

TINY = tiny_args("--train.log_every_steps=1000")


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """A tiny model trained for a few seconds: non-trivial, input-dependent greedy outputs."""
    run = tmp_path_factory.mktemp("export") / "run"
    assert (
        main(
            [
                "train",
                str(tiny_data),
                "--out",
                str(run),
                *TINY,
                "--train.max_steps=200",
                "--train.max_tokens=1024",
                "--train.accum_steps=1",
                "--train.lr_scale=0.3",
            ]
        )
        == 0
    )
    return run


@pytest.fixture(scope="module")
def test_lines(tiny_data):
    return (tiny_data.parent / "text" / "test.en").read_text().splitlines()


def int8_dot_products_exact() -> bool:
    """Whether CTranslate2's int8 GEMMs (oneDNN's) accumulate u8 x s8 products exactly in int32: with
    VNNI (avx512_vnni / avx_vnni) and oneDNN not held to AVX2. Without VNNI (an AVX2-only CPU, or
    ONEDNN_MAX_CPU_ISA=AVX2) vpmaddubsw sums each pair of products in saturating int16 first."""
    import os

    from nmt.precision import cpu_flags

    held = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in ("SSE41", "AVX", "AVX2")
    return not held and bool(cpu_flags() & {"avx512_vnni", "avx_vnni"})


def int8_agrees(q: list[str], f: list[str]) -> bool:
    """int8 greedy outputs are mostly the float32 export's. With exact int32 dot products only the
    quantization of weights and activations differs: >= 70% identical lines (37 of 40 measured on a
    Zen 4). Where pairs saturate in int16 (int8_dot_products_exact() false) the outputs drift further
    (11 of 40 identical measured, chrF against float 72): chrF >= 50 still tells a translation of the
    float output from a broken one (the float outputs shuffled across lines score 40)."""
    import sacrebleu

    same = sum(a == b for a, b in zip(q, f))
    if int8_dot_products_exact():
        return same >= 0.7 * len(f) or pytest.fail(f"int8: {same}/{len(f)} identical to float32")
    chrf = sacrebleu.corpus_chrf(q, [f]).score
    return chrf >= 50 or pytest.fail(f"int8 without VNNI: chrF {chrf:.1f} against float32 ({same} identical)")


def random_checkpoint(tmp_path, src_ckpt, **changes):
    """A random-weight tiny model with ``changes`` (e.g. pre-norm), saved with the spm of src_ckpt."""
    from nmt.checkpoint import resolve_checkpoint

    _, config = load_model(src_ckpt)
    cfg = dataclasses.replace(tiny(config["model"]["tgt_vocab_size"]), **changes)
    torch.manual_seed(0)
    model = Transformer(cfg)
    with torch.no_grad():  # non-trivial LayerNorm gains and biases
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return save(
        tmp_path / "ckpt",
        model=model,
        spm_model=resolve_checkpoint(src_ckpt) / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": {}},
    )


def test_ctranslate2_engine_scores_are_log_probs_over_the_papers_length_penalty(
    trained, test_lines, tmp_path
):
    """CTranslate2 divides by |Y| ** alpha; the engine returns nmt's score, log p(Y | x) over
    ((5 + |Y|) / 6) ** alpha (|Y| with EOS), as the torch engine does (was: CTranslate2's own)."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained), str(out)]) == 0
    torch_engine = Translator.load(trained, precision="fp32")
    ct2 = Translator.load(out, engine="ctranslate2", precision="fp32")
    lines = test_lines[:8]
    sources, _ = torch_engine.encode(lines)
    for alpha in (0.6, 1.0):
        for src, [best] in zip(sources, ct2.translate_nbest(lines, beam=4, alpha=alpha)):
            with torch.inference_mode():
                logits = torch_engine.model(torch.tensor([src]), torch.tensor([[2] + best.tokens]))[0]
            target = torch.tensor(best.tokens + [3])  # the output and EOS
            logp = F.log_softmax(logits.float(), dim=-1)[torch.arange(len(target)), target].sum().item()
            assert best.score == pytest.approx(logp / ((5 + len(target)) / 6) ** alpha, rel=1e-4, abs=1e-4)


def test_ctranslate2_engine_holds_each_sentence_to_its_own_length_limit(trained, test_lines, tmp_path):
    """CTranslate2 decodes a batch up to its longest sentence's limit; each output is held to its own
    sentence's limit a * |x| + b (EOS included) and scored as the tokens returned: log p(Y, EOS | x)
    over ((5 + |Y|) / 6) ** alpha. max_len_b = 0 makes the limits differ within one batch, and the
    tiny model's outputs run into them."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained), str(out)]) == 0
    torch_engine = Translator.load(trained, precision="fp32")
    ct2 = Translator.load(out, engine="ctranslate2", precision="fp32")
    lines = test_lines[:16]
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


def test_ctranslate2_greedy_matches_nmt(trained, test_lines, tmp_path, monkeypatch):
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained), str(out)]) == 0
    for name in ("model.bin", "spm.model", "README.md", "shared_vocabulary.json"):
        assert (out / name).exists(), name
    ref = Translator.load(trained, precision="fp32").translate(test_lines, beam=1, alpha=0.0)
    ct2 = Translator.load(out, engine="ctranslate2", precision="fp32").translate(
        test_lines, beam=1, alpha=0.0
    )
    # non-trivial outputs (the tiny model's output lengths vary with the CPU's float kernels: ~2.9-4 words)
    assert len(set(ref)) > 10 and sum(len(r.split()) for r in ref) > 2 * len(ref)
    same = sum(a == b for a, b in zip(ref, ct2))
    assert same >= 0.97 * len(ref), f"{same}/{len(ref)} identical"
    # an nmt checkpoint given to the engine is exported on the fly into the cache
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    t = Translator.load(trained, engine="ctranslate2", precision="fp32")
    assert t.translate(test_lines[:5], beam=1, alpha=0.0) == ct2[:5]
    assert len(list((tmp_path / "cache" / "ctranslate2").iterdir())) == 1
    # int8 quantized export loads and translates every line
    assert main(["export", "ctranslate2", str(trained), str(tmp_path / "q"), "--quantization", "int8"]) == 0
    q = Translator.load(tmp_path / "q", engine="ctranslate2").translate(test_lines[:5], beam=2)
    assert len(q) == 5
    # ... and is int8: CTranslate2 loads its weights as int8, the file holds under half the float
    # export's bytes, and its greedy outputs are mostly the float export's (see int8_agrees)
    import ctranslate2

    assert ctranslate2.Translator(str(tmp_path / "q"), device="cpu").compute_type.startswith("int8")
    assert ctranslate2.Translator(str(out), device="cpu").compute_type == "float32"
    assert (tmp_path / "q" / "model.bin").stat().st_size < 0.5 * (out / "model.bin").stat().st_size
    q_greedy = Translator.load(tmp_path / "q", engine="ctranslate2").translate(test_lines, beam=1, alpha=0.0)
    assert len(q_greedy) == len(test_lines) and all(q_greedy)
    assert int8_agrees(q_greedy, ct2)
    # CTranslate2 stops as --stopping fast: asking it for the exact rule is a clear error
    from nmt.infer.translate import TranslateError

    assert t.translate(test_lines[:2], beam=2, stopping="fast") == t.translate(test_lines[:2], beam=2)
    with pytest.raises(TranslateError, match="stopping"):
        t.translate(test_lines[:2], beam=2, stopping="exact")
    # MBR with the CTranslate2 engine: the MBR choice among CTranslate2's own n-best
    from nmt.infer.mbr import MBR, mbr_select

    chosen = t.translate(test_lines[:8], beam=4, mbr=MBR())
    for pick, nbest in zip(chosen, t.translate_nbest(test_lines[:8], beam=4, nbest=4)):  # same batch
        assert pick == nbest[mbr_select([h.text for h in nbest], [h.score for h in nbest])].text


@pytest.mark.parametrize(
    "changes",
    [{"norm_position": "pre"}, {"norm_position": "post"}, {"n_encoder_layers": 3, "n_decoder_layers": 1}],
)
def test_ctranslate2_scores_equal_nmt_log_probs(trained, tmp_path, changes):
    """Exact check of the weight mapping (positions, fused q/k/v, pre-norm final norms, encoder and
    decoder of different depths): CTranslate2's teacher-forced log-probabilities equal nmt's on a
    random-weight model."""
    ctranslate2 = pytest.importorskip(
        "ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')"
    )
    import sentencepiece as spm

    from nmt.infer.export_ctranslate2 import export_ctranslate2

    ckpt = random_checkpoint(tmp_path, trained, **changes)
    export_ctranslate2(ckpt, tmp_path / "ct2")
    model, _ = load_model(ckpt)
    sp = spm.SentencePieceProcessor(model_file=str(ckpt / "spm.model"))
    rng = random.Random(0)
    n = sp.get_piece_size()
    pairs = [
        (
            [rng.randrange(4, n) for _ in range(rng.randint(1, 9))],
            [rng.randrange(4, n) for _ in range(rng.randint(1, 9))],
        )
        for _ in range(6)
    ]
    tr = ctranslate2.Translator(str(tmp_path / "ct2"), compute_type="float32", intra_threads=1)
    res = tr.score_batch(
        [[sp.id_to_piece(i) for i in s] for s, _ in pairs], [[sp.id_to_piece(i) for i in t] for _, t in pairs]
    )
    for (src, tgt), r in zip(pairs, res):
        with torch.no_grad():
            logits = model(torch.tensor([src + [3]]), torch.tensor([[2] + tgt]))  # (1, T, W)
        logp = torch.log_softmax(logits[0], -1)
        expected = [float(logp[i, tok]) for i, tok in enumerate(tgt + [3])]
        assert r.log_probs == pytest.approx(expected, abs=1e-4)


def test_ctranslate2_engine_keeps_the_translate_contract(trained, tmp_path, capsys):
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    lines = ["a dog runs", "", "   ", " ".join(["the"] * 300), "a \xff cat"]  # 300 pieces > 256 positions
    src = tmp_path / "in.txt"
    src.write_bytes("\n".join(lines[:4]).encode() + b"\n" + b"a \xff cat\n")
    base = [
        "translate",
        str(trained),
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


def test_ctranslate2_engine_names_a_missing_or_corrupt_spm_model(trained, tmp_path, capsys):
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    pytest.importorskip("fastapi", reason="fastapi not installed (pip install 'nmt[serve]')")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained), str(out)]) == 0
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


def test_huggingface_export_is_exact(trained, test_lines, tmp_path):
    pytest.importorskip("transformers", reason="transformers not installed (pip install 'nmt[hf]')")
    from transformers import MarianMTModel, pipeline

    from nmt.infer.export_huggingface import to_marian

    # logits equality on random models with non-trivial LayerNorms (the permutation is exact),
    # also with a deeper encoder than decoder
    src = torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])  # (B, S), padded
    tgt = torch.tensor([[2, 5, 6, 7], [2, 11, 12, 13]])
    for name, changes in (("r", {}), ("deep", {"n_encoder_layers": 3, "n_decoder_layers": 1})):
        model, _ = load_model(random_checkpoint(tmp_path / name, trained, **changes))
        with torch.no_grad():
            expected = model(src, tgt)
            marian = to_marian(model)
            got = marian(input_ids=src, attention_mask=src.ne(0), decoder_input_ids=tgt).logits
        assert (got - expected).abs().max() < 1e-4
        assert (marian.config.encoder_layers, marian.config.decoder_layers) == (
            len(model.encoder.layers),
            len(model.decoder.layers),
        )
    # the exported directory loads in transformers and gives nmt's greedy outputs
    out = tmp_path / "hf"
    assert main(["export", "huggingface", str(trained), str(out)]) == 0
    assert isinstance(MarianMTModel.from_pretrained(out), MarianMTModel)
    translator = Translator.load(trained, precision="fp32")
    pipe = pipeline("translation", model=str(out))
    lines = test_lines[:20]
    ref = translator.translate(lines, beam=1, alpha=0.0, max_len_b=10)
    for line, r in zip(lines, ref):  # nmt's max length |x| + b (|x| with EOS) per sentence
        n = len(translator.encode([line])[0][0]) + 10
        assert pipe(line, num_beams=1, max_new_tokens=n)[0]["translation_text"] == r


def test_export_errors(trained, tmp_path, capsys):
    pytest.importorskip("transformers", reason="transformers not installed (pip install 'nmt[hf]')")
    ckpt = random_checkpoint(tmp_path, trained, norm_position="pre")
    assert main(["export", "huggingface", str(ckpt), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nmt export: error: HF Marian is post-norm") and err.count("\n") == 1
    assert not (tmp_path / "hf").exists() and not list(tmp_path.glob(".hf.tmp-*"))
    assert main(["export", "ctranslate2", str(tmp_path / "nope"), str(tmp_path / "c")]) == 2
    assert "not a checkpoint directory" in capsys.readouterr().err


def test_exports_refuse_restricted_self_attention(trained, tmp_path, capsys):
    """Neither CTranslate2 nor HF Marian has a restricted self-attention window (section 4,
    model.attention_window): such a model is refused with one line, not exported with full attention
    (its outputs would differ from nmt's without a word)."""
    ckpt = random_checkpoint(tmp_path, trained, attention_window=1)
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
    trained, tmp_path, capsys
):
    """OUT_DIR is replaced only when it is an empty directory or an earlier nmt export; the checkpoint
    itself, the run directory holding it, a file and a directory of other files are refused with
    one line and left as they were (were: deleted and replaced by the export without a word)."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    from nmt.checkpoint import resolve_checkpoint

    ckpt = resolve_checkpoint(trained)
    before = sorted(p.name for p in ckpt.iterdir())
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.txt").write_text("mine\n")
    for out, why in (
        (ckpt, f"is the checkpoint {ckpt} or a directory holding it"),
        (trained, f"is the checkpoint {ckpt} or a directory holding it"),
        (ckpt / "sub", f"is inside the checkpoint {ckpt}"),
        (notes, "exists and is not an nmt export"),
        (other, "exists and is not an nmt export"),
    ):
        for fmt in ("ctranslate2", "huggingface")[
            : 1 + (importlib.util.find_spec("transformers") is not None)
        ]:
            assert main(["export", fmt, str(trained), str(out)]) == 2
            err = capsys.readouterr().err
            assert err == f"nmt export: error: OUT_DIR {out}: {why}; choose a new directory\n"
    assert sorted(p.name for p in ckpt.iterdir()) == before and load_model(ckpt)
    assert notes.read_text() == "mine\n" and [p.name for p in other.iterdir()] == ["data.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["export", "ctranslate2", str(trained), str(empty)]) == 0
    assert main(["export", "ctranslate2", str(trained), str(empty), "--quantization", "int8"]) == 0
    assert '"quantization": "int8"' in (empty / "nmt_export.json").read_text()


def test_a_student_exports_with_its_own_depths_and_decodes_in_int8_in_both_engines(
    tiny_data, test_lines, tmp_path
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
    fp32 = Translator.load(run, precision="fp32").translate(test_lines, beam=1, alpha=0.0)
    assert len(set(fp32)) > 10
    int8 = Translator.load(run, precision="int8")
    assert (len(int8.model.encoder.layers), len(int8.model.decoder.layers)) == (3, 1)
    nmt_int8 = int8.translate(test_lines, beam=4)
    assert (
        all(nmt_int8)
        and sacrebleu.corpus_chrf(int8.translate(test_lines, beam=1, alpha=0.0), [fp32]).score >= 50
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
        assert all(ct2.translate(test_lines, beam=4))
        ct2_greedy = ct2.translate(test_lines, beam=1, alpha=0.0)
        assert sacrebleu.corpus_chrf(ct2_greedy, [fp32]).score >= 50
    if importlib.util.find_spec("transformers") is not None:
        from transformers import MarianConfig, pipeline

        out = tmp_path / "hf"
        assert main(["export", "huggingface", str(run), str(out)]) == 0
        config = MarianConfig.from_pretrained(out)
        assert (config.encoder_layers, config.decoder_layers) == (3, 1)
        pipe = pipeline("translation", model=str(out))
        translator = Translator.load(run, precision="fp32")
        for line in test_lines[:10]:
            expected = translator.translate([line], beam=1, alpha=0.0, max_len_b=10)[0]
            n = len(translator.encode([line])[0][0]) + 10
            assert pipe(line, num_beams=1, max_new_tokens=n)[0]["translation_text"] == expected


# ----------------------------------------------------------------------------- beam 4 with the length penalty
BEAM_B = (
    10  # max_len_b: |Y| <= |x| + 10 (|x| with EOS), so the tiny model's repetitive outputs meet the limit
)


def beam_fidelity(translator, lines: list[str], ours: list[str], theirs: list[str], alpha: float) -> tuple:
    """An exported model's beam-4 outputs ``theirs`` against nmt's ``ours``: (lines identical, lines
    whose difference is not explained by the length penalties; below).

    CTranslate2 and HF Marian divide log p(Y | x) by |Y| ** alpha; nmt by GNMT's ((5 + |Y|) / 6) **
    alpha (|Y| with EOS). The two penalties rank outputs of different lengths differently, which
    also changes what stays in the beam, so under alpha > 0 some lines differ by design (4 and 10 of
    40 here). Beam search is not exact either: either engine may miss an output the other finds.
    A difference is unexplained when their output is worse than nmt's under both penalties (its
    own and nmt's), both scored by nmt's model: a wrong model or a wrong search chooses such
    outputs, and so, now and then, does an approximate search that lost the better output from its
    beam (CTranslate2 also stops as --stopping fast). At alpha = 0 the two penalties are one. An
    output at its length limit is left out: there nmt ends with EOS, CTranslate2 cuts and
    rescores, HF cuts without EOS. The tests allow 2 unexplained lines in 40 (5%): measured 0 on
    the Zen 4's own kernels and 1 under the forced AVX2 path (CTranslate2 kept 'teertsen teertsen
    teertsen' where nmt's 'syalpen teertsen teertsen' is better under both); a broken export or
    search gives more (checked: 4 when CTranslate2 ignores alpha, 17 and 23 with HF's output bias
    perturbed)."""
    cfg = translator.model.cfg
    # fp32 scores of <= |x| + 10 ~ 30 tokens, each a log_softmax (|log p| <= ~10) after 2 x layers x
    # (d_model + d_ff) accumulations: what two engines' kernels may disagree by on one output
    n_accum = 2 * cfg.n_layers * (cfg.d_model + cfg.d_ff) + cfg.tgt_vocab_size
    slack = 30 * tol(torch.float32, n_accum, scale=10.0)
    same = unexplained = 0
    for line, a, b in zip(lines, ours, theirs):
        if a == b:
            same += 1
            continue
        (src,), _ = translator.encode([line])
        limit = len(src) + BEAM_B
        scored = []
        for text in (a, b):
            ids = translator.sp.encode(text) if text else []
            with torch.inference_mode():
                logits = translator.model(torch.tensor([src]), torch.tensor([[2] + ids]))[0]
            target = torch.tensor(ids + [3])
            scored.append(
                (
                    F.log_softmax(logits.float(), -1)[torch.arange(len(target)), target].sum().item(),
                    len(target),
                )
            )
        (lp_a, n_a), (lp_b, n_b) = scored
        if max(n_a, n_b) >= limit - 1:  # at the limit (re-encoded text may count one piece fewer)
            continue
        worse_for_nmt = lp_b / ((5 + n_b) / 6) ** alpha < lp_a / ((5 + n_a) / 6) ** alpha - slack
        worse_for_them = lp_b / n_b**alpha < lp_a / n_a**alpha - slack
        unexplained += worse_for_nmt and worse_for_them
    return same, unexplained


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_ctranslate2_export_searches_beam_4_as_nmt_does_up_to_the_length_penalty_form(
    trained, test_lines, tmp_path, alpha
):
    """The CTranslate2 export under beam 4, with and without the length penalty: every line is nmt's
    output or differs as beam_fidelity explains (39 and 36 of 40 identical measured at alpha 0 and 0.6)."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    out = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained), str(out)]) == 0
    nmt = Translator.load(trained, precision="fp32")
    ct2 = Translator.load(out, engine="ctranslate2", precision="fp32")
    ours = nmt.translate(test_lines, beam=4, alpha=alpha, max_len_b=BEAM_B)
    theirs = ct2.translate(test_lines, beam=4, alpha=alpha, max_len_b=BEAM_B)
    same, unexplained = beam_fidelity(nmt, test_lines, ours, theirs, alpha)
    assert same >= 0.6 * len(test_lines) and unexplained <= 0.05 * len(test_lines), (same, unexplained)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_huggingface_export_searches_beam_4_as_nmt_does_up_to_the_length_penalty_form(
    trained, test_lines, tmp_path, alpha
):
    """The HF Marian export under transformers' beam search (num_beams=4, length_penalty=alpha):
    every line is nmt's output or differs as beam_fidelity explains (37 and 30 of 40 identical measured
    at alpha 0 and 0.6)."""
    pytest.importorskip("transformers", reason="transformers not installed (pip install 'nmt[hf]')")
    from transformers import pipeline

    out = tmp_path / "hf"
    assert main(["export", "huggingface", str(trained), str(out)]) == 0
    nmt = Translator.load(trained, precision="fp32")
    pipe = pipeline("translation", model=str(out))
    ours = nmt.translate(test_lines, beam=4, alpha=alpha, max_len_b=BEAM_B)
    theirs = [
        pipe(line, num_beams=4, length_penalty=alpha, max_new_tokens=len(nmt.encode([line])[0][0]) + BEAM_B)[
            0
        ]["translation_text"]
        for line in test_lines
    ]
    same, unexplained = beam_fidelity(nmt, test_lines, ours, theirs, alpha)
    assert same >= 0.6 * len(test_lines) and unexplained <= 0.05 * len(test_lines), (same, unexplained)
