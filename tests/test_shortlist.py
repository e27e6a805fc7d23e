"""Vocabulary shortlists (nmt.infer.shortlist): building, the file, the union per batch, search over
the union (normalised over it), the CLI, the Python API and CTranslate2's vocabulary map."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from nmt.checkpoint import resolve_checkpoint
from nmt.cli import main
from nmt.infer.options import SearchOptions
from nmt.infer.shortlist import (
    CHECKPOINT_FILE,
    BuildOptions,
    Shortlist,
    ShortlistError,
    build,
    dumps,
    ibm1,
    load,
    of_checkpoint,
    vmap_text,
)
from nmt.infer.translate import BatchedSearch, TranslateError, Translator
from nmt.realtext.quality import QualityOptions


@pytest.fixture(scope="module")
def lines(tiny_data):
    return (tiny_data.parent / "text" / "test.en").read_text().splitlines()[:12]


@pytest.fixture(scope="module")
def small_shortlist(tiny_data):
    """A restrictive shortlist (2 candidates a source piece, 5 frequent pieces)."""
    return build(tiny_data, BuildOptions(best=2, frequent=5))


def sources_of(t: Translator, lines):
    return t.encode(lines)[0]


def all_ids_shortlist(vocab: int) -> Shortlist:
    return Shortlist(vocab, [], {s: list(range(4, vocab)) for s in range(4, vocab)})


# ----------------------------------------------------------------------------- search over the union
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_shortlist_of_every_id_gives_the_full_vocabulary_output_bit_for_bit(
    trained_tiny_run, lines, precision
):
    t = Translator.load(trained_tiny_run, device="cpu", precision=precision)
    vocab = t.model.cfg.tgt_vocab_size
    for beam, nbest in ((4, 2), (1, 1)):
        full = t.translate_nbest(lines, beam=beam, nbest=nbest)
        t.use_shortlist(all_ids_shortlist(vocab))
        listed = t.translate_nbest(lines, beam=beam, nbest=nbest)
        t.use_shortlist(None)
        assert [[(x.tokens, x.score) for x in r] for r in listed] == [
            [(x.tokens, x.score) for x in r] for r in full
        ]


@pytest.mark.parametrize("scope", ["batch", "sentence"])
def test_scores_are_log_softmax_over_the_shortlist(trained_tiny_run, lines, small_shortlist, scope):
    """Marian's and CTranslate2's normalisation: log p(y_t) = log_softmax over the pieces U searched
    (not over the whole vocabulary) at each step, the union of the batch (scope "batch") or the
    sentence's own list (scope "sentence"); every output id is in U."""
    t = Translator.load(trained_tiny_run, device="cpu", precision="fp32")
    sources = sources_of(t, lines[:4])
    width = max(map(len, sources))
    src = torch.tensor([s + [0] * (width - len(s)) for s in sources])  # (B, S)
    shortlist = dataclasses.replace(small_shortlist, scope=scope)
    hyps = BatchedSearch(SearchOptions(beam=1), shortlist=shortlist).sources(
        t.model, sources, batch_tokens=10**6
    )
    differs = False
    for i, (h,) in enumerate(hyps):
        rows = shortlist.rows(src if scope == "batch" else src[i : i + 1])  # (U,)
        assert rows.numel() < t.model.cfg.tgt_vocab_size
        assert set(h.tokens) <= set(rows.tolist())
        tgt_in = torch.tensor([[2] + h.tokens])  # BOS + output
        with torch.inference_mode():
            logits = t.model(src[i : i + 1], tgt_in)[0].float()  # (T, W)
        over_u = F.log_softmax(logits[:, rows], dim=-1)  # (T, U)
        col = {int(r): j for j, r in enumerate(rows)}
        expected = [over_u[step, col[y]].item() for step, y in enumerate(h.tokens + [3])]
        assert h.positional_scores == pytest.approx(expected, abs=1e-5)
        over_w = F.log_softmax(logits, dim=-1)[torch.arange(len(expected)), torch.tensor(h.tokens + [3])]
        differs |= not torch.allclose(over_w, torch.tensor(expected), atol=1e-5)
    assert differs  # the full-vocabulary normalisation would give other scores


def test_an_ensemble_searches_with_a_shortlist(trained_tiny_run, lines, small_shortlist, tmp_path):
    """docs/translation.md: shortlists work with ensembles. An ensemble of one model twice averages
    equal log-probabilities over the union, so it outputs what the model alone does."""
    path = tmp_path / "shortlist.txt"
    path.write_text(dumps(small_shortlist), encoding="utf-8")
    alone = Translator.load(trained_tiny_run, device="cpu", precision="fp32", shortlist=path)
    both = Translator.load(
        [trained_tiny_run, trained_tiny_run], device="cpu", precision="fp32", shortlist=path
    )
    assert both.shortlist is not None
    for beam in (4, 1):
        expected = alone.translate_sentences(lines, beam=beam)
        assert both.translate_sentences(lines, beam=beam) == expected
        assert expected != Translator.load(
            trained_tiny_run, device="cpu", precision="fp32"
        ).translate_sentences(lines, beam=beam)


def test_a_sentence_is_searched_over_its_own_list_whatever_it_is_batched_with(
    trained_tiny_run, lines, small_shortlist
):
    """The default scope "sentence": each sentence's hypotheses are those it gets searched alone,
    in one batch with the others or in batches of one, and every output piece is in its own list;
    the scope "batch" searches a batch's union instead (outputs of some sentences differ here)."""
    t = Translator.load(trained_tiny_run, device="cpu", precision="fp32", shortlist=small_shortlist)
    assert t.shortlist.scope == "sentence"
    together = t.translate_nbest(lines, beam=4, nbest=2)
    apart = t.translate_nbest(lines, beam=4, nbest=2, batch_tokens=1)  # every sentence its own batch
    alone = [t.translate_nbest([line], beam=4, nbest=2)[0] for line in lines]
    for other in (apart, alone):
        assert [[h.tokens for h in r] for r in other] == [[h.tokens for h in r] for r in together]
        for r, o in zip(together, other):
            assert [h.score for h in o] == pytest.approx([h.score for h in r], abs=1e-5)
    for source, r in zip(sources_of(t, lines), together):
        own = set(small_shortlist.rows(torch.tensor([source])).tolist())
        assert all(set(h.tokens) <= own for h in r)
    batch = Translator.load(
        trained_tiny_run, device="cpu", precision="fp32", shortlist=small_shortlist, shortlist_scope="batch"
    )
    assert batch.shortlist.scope == "batch" and t.shortlist.scope == "sentence"
    assert [[h.tokens for h in r] for r in batch.translate_nbest(lines, beam=4, nbest=2)] != [
        [h.tokens for h in r] for r in together
    ]
    with pytest.raises(TranslateError, match="shortlist scope 'everything'"):
        t.use_shortlist(small_shortlist, scope="everything")


def test_union_groups_search_each_sentence_over_its_groups_union_in_any_batch(
    trained_tiny_run, lines, small_shortlist
):
    """union_groups (nmt serve: one group per request) with the scope "batch": a sentence is
    searched over the union of its group's sentences, the same in one batch with other groups,
    alone, or with its group only."""
    t = Translator.load(
        trained_tiny_run, device="cpu", precision="fp32", shortlist=small_shortlist, shortlist_scope="batch"
    )
    sentences, groups = lines[:6], ["a", "a", "b", "b", "c", "c"]

    def search(indices, **kw):
        chosen = [sentences[i] for i in indices]
        return t.translate_nbest(chosen, beam=4, nbest=2, union_groups=[groups[i] for i in indices], **kw)

    together = search(range(6))
    apart = search(range(6), batch_tokens=1)  # every sentence its own batch
    in_groups = [r for g in ("a", "b", "c") for r in search([i for i in range(6) if groups[i] == g])]
    for other in (apart, in_groups):
        assert [[h.tokens for h in r] for r in other] == [[h.tokens for h in r] for r in together]
        for r, o in zip(together, other):
            assert [h.score for h in o] == pytest.approx([h.score for h in r], abs=1e-5)
    sources = sources_of(t, sentences)
    for i, r in enumerate(together):
        pieces = torch.tensor([[p for j in range(6) if groups[j] == groups[i] for p in sources[j]]])
        union = set(small_shortlist.rows(pieces).tolist())
        assert all(set(h.tokens) <= union for h in r)
    with pytest.raises(ValueError, match="union_groups: 2 lists for 6 sources"):
        t.translate_nbest(sentences, union_groups=["a", "b"])


def test_union_holds_the_special_ids_frequent_pieces_and_the_lists_of_the_batch():
    sl = Shortlist(30, [10, 11], {5: [20, 21], 6: [22], 7: [23]})
    src = torch.tensor([[5, 6, 3], [6, 3, 0]])  # sentence 2 padded; piece 7 absent
    assert sl.rows(src).tolist() == [0, 1, 2, 3, 10, 11, 20, 21, 22]
    assert sl.rows(src, prefix=[[25], []]).tolist() == [0, 1, 2, 3, 10, 11, 20, 21, 22, 25]
    assert sl.rows(torch.tensor([[9, 3]])).tolist() == [0, 1, 2, 3, 10, 11]


def test_sentence_keeps_are_each_sources_own_union_with_its_prefix():
    """``sentence_keeps`` (a batch's per-sentence lists at once) equals ``keep`` of each source alone,
    prefixes included; ``restrict_rows`` lists each sentence's ids ascending, its padding never valid."""
    sl = Shortlist(30, [10, 11], {5: [20, 21], 6: [22], 7: [23], 8: [29]})
    sources, prefix = [[5, 6, 3], [7, 3], [9, 9, 8, 3]], [[25], [], [24, 26]]
    got = sl.sentence_keeps(sources, prefix, torch.device("cpu"))  # (3, 30)
    for i, src in enumerate(sources):
        assert torch.equal(got[i], sl.keep(torch.tensor(src), [prefix[i]])), i
    assert torch.equal(
        sl.sentence_keeps(sources, None, torch.device("cpu"))[1], sl.keep(torch.tensor([7, 3]))
    )

    class Decoder(torch.nn.Module):  # a tied output layer over 30 ids: what restrict_rows reads
        def __init__(self):
            super().__init__()
            self.output_projection, self.embed_tokens = None, torch.nn.Embedding(30, 4)

    class Model:
        cfg, decoder = None, Decoder()

    restriction = sl.restrict_rows(Model(), got)
    assert restriction.ids == [row.nonzero().squeeze(1).tolist() for row in got]
    model = restriction.model
    assert model.ids.shape == (3, max(map(len, restriction.ids)))
    for i, ids in enumerate(restriction.ids):  # the padding positions score -inf, the others 0 (no bias)
        assert model.ids[i, : len(ids)].tolist() == ids
        assert torch.isinf(model.bias[i, 0, len(ids) :]).all() and not model.bias[i, 0, : len(ids)].any()


def test_shortlist_with_allowed_tokens_is_an_error(trained_tiny_run, lines, small_shortlist):
    t = Translator.load(trained_tiny_run, device="cpu", precision="fp32")
    with pytest.raises(ValueError, match="allowed_tokens: masks the full vocabulary"):
        BatchedSearch(shortlist=small_shortlist, allowed_tokens=lambda src: (lambda logp, *a: logp)).sources(
            t.model, sources_of(t, lines[:2])
        )


# ----------------------------------------------------------------------------- building and the file
def model1_reference(pairs, vocab, iterations):
    """IBM Model 1 EM written from the formula, one sentence and one pair at a time."""
    null = vocab
    t = {}
    for src, tgt in pairs:
        for s, w in itertools.product(src + [null], tgt):
            t[(s, w)] = 1.0
    for _ in range(iterations):
        count = dict.fromkeys(t, 0.0)
        for src, tgt in pairs:
            for w in tgt:
                z = sum(t[(s, w)] for s in src + [null])
                for s in src + [null]:
                    count[(s, w)] += t[(s, w)] / z
        total = {}
        for (s, _), c in count.items():
            total[s] = total.get(s, 0.0) + c
        t = {(s, w): c / total[s] for (s, w), c in count.items()}
    return t


def test_ibm1_equals_model_1_written_from_the_formula():
    pairs = [([4, 5], [7, 8]), ([4, 6], [7, 9]), ([5], [8]), ([6, 6, 4], [9, 7, 7, 10])]
    vocab = 12
    src = np.array([s for p, _ in pairs for s in p], dtype=np.int64)
    tgt = np.array([w for _, q in pairs for w in q], dtype=np.int64)
    src_off = np.concatenate([[0], np.cumsum([len(p) for p, _ in pairs])])
    tgt_off = np.concatenate([[0], np.cumsum([len(q) for _, q in pairs])])
    for iterations in (1, 4):
        keys, prob = ibm1(src, src_off, tgt, tgt_off, vocab=vocab, iterations=iterations, chunk=3)
        ref = model1_reference(pairs, vocab, iterations)
        got = {(int(k) // vocab, int(k) % vocab): float(p) for k, p in zip(keys, prob)}
        assert got.keys() == ref.keys()
        for key in ref:
            assert got[key] == pytest.approx(ref[key], rel=1e-12)


def test_build_lists_each_source_words_translation_and_the_frequent_pieces(tiny_data):
    """The tiny corpus maps every English word to one German word: a word of one piece on both
    sides has its translation as its best candidate; frequent = the most frequent target pieces."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tiny_data / "spm.model"))
    sl = build(tiny_data, BuildOptions(best=1, frequent=3))
    assert sl.spm_sha256 == hashlib.sha256((tiny_data / "spm.model").read_bytes()).hexdigest()
    assert sl.info["statistic"] == "ibm1" and sl.info["sentences"] == 600
    for word in ("house", "tree", "ball", "green", "runs"):
        (src_piece,), (tgt_piece,) = sp.encode(word), sp.encode(word[::-1] + "en")
        assert sl.candidates[src_piece] == [tgt_piece], word
    from nmt.data.dataset import ParallelDataset

    data = ParallelDataset.load(tiny_data, "train")
    counts = np.bincount(np.concatenate([data[i][1] for i in range(len(data))]), minlength=sl.vocab_size)
    assert sl.frequent == sorted(np.argsort(-counts, kind="stable")[:3].tolist())
    with_identity = build(tiny_data, BuildOptions(best=1, frequent=3, identity=True))
    assert all(s in with_identity.candidates[s] for s in range(4, sl.vocab_size))


def test_shortlist_file_round_trips(tmp_path, small_shortlist):
    from nmt.infer.shortlist import save as save_shortlist

    path = save_shortlist(small_shortlist, tmp_path / "s.txt")
    again = load(path)
    assert again == small_shortlist
    assert dumps(again) == path.read_text(encoding="utf-8")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("nmt-shortlist\t1\t{") and lines[1].startswith("frequent\t")


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda ls: ["hello"] + ls[1:], ":1: not an nmt shortlist"),
        (lambda ls: [ls[0].replace("\t1\t", "\t9\t")] + ls[1:], ":1: shortlist format version 9"),
        (lambda ls: ls[:2] + ["5\t4 x"] + ls[3:], ":3: expected ids"),
        (lambda ls: ls[:2] + ["5\t4 999"] + ls[3:], ":3: id 999 outside 4..119"),
        (lambda ls: ls[:2] + ["5\t2"] + ls[3:], ":3: id 2 outside"),
        (lambda ls: ls[:3] + [ls[2]] + ls[3:], ":4: source id"),
        (lambda ls: ls[:2] + ["5 6\t7"] + ls[3:], ":3: expected one source id"),
    ],
)
def test_a_bad_shortlist_file_is_an_error_naming_the_line(tmp_path, small_shortlist, change, message):
    lines = dumps(small_shortlist).splitlines()
    path = tmp_path / "bad.txt"
    path.write_text("\n".join(change(lines)) + "\n", encoding="utf-8")
    with pytest.raises(ShortlistError, match=f"bad.txt{message}"):
        load(path)


# ----------------------------------------------------------------------------- CLI, API, CTranslate2
def test_cli_builds_a_shortlist_and_translates_with_it_as_the_api_does(
    trained_tiny_run, tiny_data, lines, tmp_path, capsys
):
    out = tmp_path / "s.txt"
    assert main(["shortlist", str(tiny_data), "--out", str(out), "--best", "2", "--frequent", "5"]) == 0
    loaded, built = load(out), build(tiny_data, BuildOptions(best=2, frequent=5))
    assert {**loaded.info, "seconds": 0} == {**built.info, "seconds": 0}  # the build's wall-clock time aside
    assert dataclasses.replace(loaded, info={}) == dataclasses.replace(built, info={})
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert (
        main(
            [
                "translate",
                str(trained_tiny_run),
                "-i",
                str(tmp_path / "in.txt"),
                "--shortlist",
                str(out),
                "--quiet",
                "--precision",
                "fp32",
            ]
        )
        == 0
    )
    cli = capsys.readouterr().out.splitlines()
    api = Translator.load(trained_tiny_run, device="cpu", precision="fp32", shortlist=out).translate(lines)
    full = Translator.load(trained_tiny_run, device="cpu", precision="fp32").translate_sentences(lines)
    assert cli == api and api != full  # restrictive enough to change outputs


def checkpoint_with_shortlist(run_dir: Path, shortlist_file: Path, out: Path) -> Path:
    """A copy of the run's checkpoint carrying ``shortlist_file`` as its own shortlist.txt."""
    shutil.copytree(resolve_checkpoint(run_dir), out)
    shutil.copy(shortlist_file, out / CHECKPOINT_FILE)
    return out


def test_a_checkpoints_own_shortlist_is_searched_with_unless_told_otherwise(
    trained_tiny_run, tiny_data, lines, tmp_path, capsys
):
    """CHECKPOINT/shortlist.txt: nmt translate and Translator.load search with it by default, as
    with --shortlist FILE; --no-shortlist / shortlist=False search the full vocabulary; an ensemble
    takes none; --shortlist with --no-shortlist is an error (exit 2)."""
    path = tmp_path / "s.txt"
    assert main(["shortlist", str(tiny_data), "--out", str(path), "--best", "2", "--frequent", "5"]) == 0
    own = checkpoint_with_shortlist(trained_tiny_run, path, tmp_path / "ckpt")
    assert of_checkpoint(own) == own / CHECKPOINT_FILE and of_checkpoint(trained_tiny_run) is None
    listed = Translator.load(trained_tiny_run, device="cpu", precision="fp32", shortlist=path).translate(
        lines
    )
    full = Translator.load(trained_tiny_run, device="cpu", precision="fp32").translate(lines)
    assert listed != full
    assert Translator.load(own, device="cpu", precision="fp32").translate(lines) == listed
    assert Translator.load(own, device="cpu", precision="fp32", shortlist=False).translate(lines) == full
    assert Translator.load([own, own], device="cpu", precision="fp32").shortlist is None
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    argv = ["translate", str(own), "-i", str(tmp_path / "in.txt"), "--quiet", "--precision", "fp32"]
    capsys.readouterr()
    for extra, expected in (([], listed), (["--no-shortlist"], full)):
        assert main([*argv, *extra]) == 0
        assert capsys.readouterr().out.splitlines() == expected
    assert main([*argv, "--no-shortlist", "--shortlist", str(path)]) == 2
    assert "--shortlist FILE and --no-shortlist: give one" in capsys.readouterr().err


def test_sentences_with_constraints_search_the_full_vocabulary_apart_from_the_others(
    trained_tiny_run, lines, small_shortlist
):
    """With a shortlist, a call with constraints searches the sentences that carry phrases over the
    full vocabulary and the others over the shortlist, each set on its own: each output is what
    that set alone gives, whatever phrases the sentences beside it carry."""
    listed = Translator.load(trained_tiny_run, device="cpu", precision="fp32", shortlist=small_shortlist)
    full = Translator.load(trained_tiny_run, device="cpu", precision="fp32")
    sentences = lines[:6]
    phrases = [full.translate(s).split()[-1] for s in sentences]  # a word each output can spell
    constraints = [[phrases[i]] if i % 2 == 0 else [] for i in range(6)]
    held, free = [0, 2, 4], [1, 3, 5]
    got = [r[0].text for r in listed.translate_nbest(sentences, beam=4, constraints=constraints)]
    want_held = full.translate_nbest(
        [sentences[i] for i in held], beam=4, constraints=[constraints[i] for i in held]
    )
    want_free = listed.translate_nbest([sentences[i] for i in free], beam=4)
    assert [got[i] for i in held] == [r[0].text for r in want_held]
    assert [got[i] for i in free] == [r[0].text for r in want_free]
    assert all(phrases[i] in got[i] for i in held)
    assert [got[i] for i in free] != full.translate_sentences([sentences[i] for i in free], beam=4)
    none = listed.translate_nbest(sentences, beam=4, constraints=[[] for _ in sentences])
    assert [r[0].text for r in none] == [r[0].text for r in listed.translate_nbest(sentences, beam=4)]


def test_a_shortlist_of_another_vocabulary_is_an_error(trained_tiny_run, tmp_path, capsys):
    other = dataclasses.replace(Shortlist(120, [5], {5: [6]}), spm_sha256="0" * 64)
    path = tmp_path / "other.txt"
    path.write_text(dumps(other))
    with pytest.raises(TranslateError, match="another SentencePiece model"):
        Translator.load(trained_tiny_run, device="cpu", shortlist=path)
    path.write_text(dumps(Shortlist(50, [5], {5: [6]})))
    assert (
        main(["translate", str(trained_tiny_run), "--shortlist", str(path), "-i", str(path), "--quiet"]) == 2
    )
    assert "built for a vocabulary of 50 pieces" in capsys.readouterr().err


def test_vmap_lists_pieces_with_the_frequent_ones_under_the_empty_source():
    vocab = ["<blank>", "<unk>", "<s>", "</s>", "▁a", "▁b", "x", "y"]
    sl = Shortlist(8, [4, 6], {5: [6, 7], 7: [4]})
    assert vmap_text(sl, vocab) == "\t▁a x\n▁b\tx y\ny\t▁a\n"


def test_ctranslate2_with_the_vocabulary_map_searches_the_same_pieces_as_nmt(
    trained_tiny_run, tiny_data, lines, tmp_path, monkeypatch, small_shortlist
):
    """Greedy search over the same union: nmt's shortlist and CTranslate2's use_vmap give the same
    outputs (the choice at each step is the argmax over the same pieces), and they differ from the
    full vocabulary's."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    from nmt.export.ctranslate2 import ExportError

    export = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained_tiny_run), str(export)]) == 0
    path = tmp_path / "s.txt"
    assert (
        main(
            [
                "shortlist",
                str(tiny_data),
                "--out",
                str(path),
                "--best",
                "2",
                "--frequent",
                "5",
                "--ctranslate2",
                str(export),
            ]
        )
        == 0
    )
    assert (export / "vmap.txt").read_text(encoding="utf-8") == vmap_text(
        small_shortlist, json.loads((export / "shared_vocabulary.json").read_text(encoding="utf-8"))
    )
    nmt = Translator.load(
        trained_tiny_run, device="cpu", precision="fp32", shortlist=path, shortlist_scope="batch"
    ).translate(lines, beam=1, quality=QualityOptions(guards=False))
    ct2 = Translator.load(export, engine="ctranslate2", precision="fp32", shortlist=path)
    assert ct2.translate_sentences(lines, beam=1) == nmt
    assert (
        Translator.load(export, engine="ctranslate2", precision="fp32").translate_sentences(lines, beam=1)
        != nmt
    )
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))  # a checkpoint: exported with its map
    assert (
        Translator.load(trained_tiny_run, engine="ctranslate2", precision="fp32", shortlist=path).translate(
            lines, beam=1, quality=QualityOptions(guards=False)
        )
        == nmt
    )
    with pytest.raises(TranslateError, match="vocabulary map is per batch"):
        Translator.load(export, engine="ctranslate2", shortlist=path, shortlist_scope="sentence")
    (export / "vmap.txt").unlink()
    with pytest.raises(ExportError, match="vmap.txt: missing"):
        Translator.load(export, engine="ctranslate2", shortlist=path)


def test_a_ctranslate2_export_carries_the_checkpoints_own_shortlist_as_its_vocabulary_map(
    trained_tiny_run, tiny_data, lines, tmp_path, monkeypatch, capsys
):
    """`nmt export ctranslate2` of a checkpoint with its own shortlist.txt writes its vmap.txt and
    the shortlist beside it; the export is then searched with that map by default (the outputs of
    the checkpoint with the same shortlist), with the full vocabulary under --no-shortlist /
    shortlist=False; `--no-shortlist` exports neither file, and is refused for other formats."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    monkeypatch.setenv("NMT_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "s.txt"
    assert main(["shortlist", str(tiny_data), "--out", str(path), "--best", "2", "--frequent", "5"]) == 0
    own = checkpoint_with_shortlist(trained_tiny_run, path, tmp_path / "ckpt")
    export, bare = tmp_path / "ct2", tmp_path / "ct2-bare"
    assert main(["export", "ctranslate2", str(own), str(export)]) == 0
    assert main(["export", "ctranslate2", str(own), str(bare), "--no-shortlist"]) == 0
    vocab = json.loads((export / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert (export / "vmap.txt").read_text(encoding="utf-8") == vmap_text(load(path), vocab)
    assert load(export / CHECKPOINT_FILE) == load(path) and of_checkpoint(export) == export / CHECKPOINT_FILE
    assert "vmap.txt" in (export / "README.md").read_text(encoding="utf-8")
    assert not (bare / "vmap.txt").exists() and of_checkpoint(bare) is None

    def greedy(model, **kw):
        return Translator.load(model, engine="ctranslate2", precision="fp32", **kw).translate_sentences(
            lines, beam=1
        )

    listed, full = greedy(trained_tiny_run, shortlist=path), greedy(trained_tiny_run, shortlist=False)
    assert listed != full  # the map changes outputs
    assert greedy(export) == listed and greedy(export, shortlist=False) == full and greedy(bare) == full
    capsys.readouterr()
    assert main(["export", "onnx", str(own), str(tmp_path / "onnx"), "--no-shortlist"]) == 2
    assert "--no-shortlist applies to ctranslate2 exports only" in capsys.readouterr().err


def test_serve_searches_with_the_shortlist_and_constraints_with_the_full_vocabulary(
    trained_tiny_run, tiny_data, lines, tmp_path
):
    pytest.importorskip("fastapi", reason="nmt[serve] not installed (pip install 'nmt[serve]')")
    import argparse

    from fastapi.testclient import TestClient

    from nmt.serve.app import create_app
    from nmt.serve.command import ServeError, add_serve_args, build_models

    path = tmp_path / "s.txt"
    assert main(["shortlist", str(tiny_data), "--out", str(path), "--best", "2", "--frequent", "5"]) == 0
    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    models = build_models(
        {"tiny": trained_tiny_run}, parser.parse_args([f"tiny={trained_tiny_run}", "--shortlist", str(path)])
    )
    expected = Translator.load(trained_tiny_run, device="cpu", precision="fp32", shortlist=path).translate(
        lines
    )
    full = Translator.load(trained_tiny_run, device="cpu", precision="fp32")
    with TestClient(create_app(models)) as client:
        r = client.post("/translate", json={"text": lines})
        assert r.status_code == 200 and [t["text"] for t in r.json()["translations"]] == expected
        assert client.get("/models").json()["models"][0]["shortlist"] == "s.txt"
        phrase = full.translate(lines[0]).split()[-1]
        want = full.translate_nbest([lines[0]], beam=4, constraints=[[phrase]])[0][0].text
        r = client.post("/translate", json={"text": [lines[0], lines[1]], "constraints": [[phrase], []]})
        assert r.status_code == 200, r.text
        alone = Translator.load(trained_tiny_run, device="cpu", precision="fp32", shortlist=path).translate(
            lines[1:2]
        )  # the request's union is of its sentences without phrases
        assert [t["text"] for t in r.json()["translations"]] == [want, *alone]
    own = checkpoint_with_shortlist(trained_tiny_run, path, tmp_path / "ckpt")
    for extra, name in (([], "shortlist.txt"), (["--no-shortlist"], None)):
        served = build_models({"own": own}, parser.parse_args([f"own={own}", *extra]))
        assert served["own"].info["shortlist"] == name
    for bad, message in (
        (["--shortlist", f"other={path}"], "no model named 'other'"),
        (["--shortlist", str(tmp_path / "nope")], "no such file"),
        (["--shortlist", str(path), "--no-shortlist"], "give one"),
    ):
        with pytest.raises(ServeError, match=message):
            build_models({"tiny": trained_tiny_run}, parser.parse_args([f"tiny={trained_tiny_run}", *bad]))
