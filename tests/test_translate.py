"""nmt/infer/translate.py: the Translator API on a tiny random-weight checkpoint (and `nmt translate`'s
n-best lines beside it)."""

import pytest
from translate_fixtures import cli

from nmt.data.batching import make_batches
from nmt.infer.options import SearchOptions
from nmt.infer.translate import (
    BatchedSearch,
    Sampling,
    SentenceInputs,
    Translator,
    translate_ids,
)


def test_nbest_output_and_api(tiny_checkpoint, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("der hund\n\nein baum und eine katze\n", encoding="utf-8")
    assert cli(tiny_checkpoint, "-i", src, "--nbest", "2", "--beam", "2", "--max-len-b", "3", "--quiet") == 0
    rows = [r.split("\t") for r in capsys.readouterr().out.splitlines()]
    assert [r[0] for r in rows] == ["1", "1", "2", "3", "3"]
    assert float(rows[0][1]) >= float(rows[1][1])

    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    sentences = ["der hund", "", "ein baum und eine katze", "blau"]
    texts = t.translate_sentences(sentences, beam=2, max_len_a=0, max_len_b=4)
    assert len(texts) == 4 and texts[1] == ""
    nbest = t.translate_nbest(sentences, beam=2, nbest=2, max_len_a=0, max_len_b=4, batch_tokens=8)
    assert [n[0].text for n in nbest] == texts  # batching does not change the result
    assert all(n[0].score >= n[-1].score for n in nbest if n)
    with pytest.warns(UserWarning, match="line 1: 300 pieces"):
        t.translate_sentences([" ".join(["katze"] * 300)], beam=1, alpha=0, max_len_a=0, max_len_b=2)


def test_translate_ids_restores_training_mode(tiny_checkpoint):
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    model = t.model.train()
    ids = [t.sp.encode("der hund"), [], t.sp.encode("ein baum und eine katze")]
    out = translate_ids(
        model, ids, SearchOptions(beam=1, alpha=0.0, max_len_a=0, max_len_b=5), batch_tokens=100
    )
    assert model.training and len(out) == 3 and out[1] == []
    assert all(3 not in o for o in out) and all(len(o) <= 4 for o in out)
    model.eval()
    assert out == [
        t.tokens
        for t in (
            n[0]
            for n in t.translate_nbest(
                ["der hund", "", "ein baum und eine katze"], beam=1, alpha=0.0, max_len_a=0, max_len_b=5
            )
        )
    ]


SEARCH = dict(beam=2, max_len_a=0, max_len_b=4)


def test_make_batches():
    lengths = [3, 10, 1, 7, 7, 2]
    batches = make_batches(lengths, batch_tokens=15)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) * max(lengths[i] for i in b) <= 15 or len(b) == 1 for b in batches)
    assert batches[0] == [1]  # longest first
    assert make_batches(lengths, batch_tokens=10**6, max_sentences=4) == [[1, 3, 4, 0], [5, 2]]


def test_a_prefix_that_is_not_a_list_of_str_is_a_type_error_naming_it(tiny_checkpoint):
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    with pytest.raises(TypeError, match=r"prefix 2: expected str, got int"):
        t.translate_sentences(["der hund", "blau"], prefix=["", 3], **SEARCH)
    with pytest.raises(TypeError, match=r"prefix: expected a list of str \(one per sentence\), got str"):
        t.translate_sentences("der hund", prefix="der", **SEARCH)  # not read as 3 one-letter prefixes


@pytest.mark.parametrize(
    "option, message",
    [
        (dict(beam=0), r"beam=0: must be an integer >= 1"),
        (dict(beam=2.5), r"beam=2.5: must be an integer >= 1"),
        (dict(max_len_a=float("nan")), r"max_len_a=nan, max_len_b=50: must be finite"),
        (dict(max_len_a=float("inf")), r"max_len_a=inf, max_len_b=50: must be finite"),
        (dict(max_len_b=float("inf")), r"max_len_a=1.0, max_len_b=inf: must be finite"),
    ],
)
def test_a_search_option_out_of_range_is_a_value_error_naming_it(tiny_checkpoint, option, message):
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    with pytest.raises(ValueError, match=message):
        t.translate_sentences(["der hund", "blau"], **option)


@pytest.mark.parametrize(
    "option, message",
    [
        (dict(beam=0), r"beam=0: must be an integer >= 1"),
        (dict(beam=1, nbest=2), r"nbest=2: must be between 1 and beam=1"),
        (dict(beam=4, nbest=2, sampling={}), r"nbest=2: sampling draws one output per sentence"),
        (dict(sampling={"temperature": -1.0}), r"temperature=-1.0, topk=0, topp=1.0: need 0 < T < inf"),
        (dict(alpha=1e308), r"alpha=1e\+308: must be a number in \[-100, 100\]"),
        (dict(alpha=float("nan")), r"alpha=nan: must be a number in \[-100, 100\]"),
        (dict(sampling={"topp": 0.0}), r"temperature=1.0, topk=0, topp=0.0: need 0 < T < inf"),
    ],
)
@pytest.mark.parametrize("lines", [["", " "], ["der hund"]])
def test_search_options_are_checked_before_any_input_is_read(tiny_checkpoint, lines, option, message):
    """Also for a batch of empty lines, which needs no search (was: returned without a word), and
    nbest > 1 with sampling, which draws one output (was: silently one). Sampling's own range is
    checked when the Sampling is made."""
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    with pytest.raises(ValueError, match=message):
        option = {k: Sampling(**v) if k == "sampling" else v for k, v in option.items()}
        t.translate_nbest(lines, **option)


@pytest.mark.parametrize("per_sentence", ["prefix", "constraints"])
@pytest.mark.parametrize("count", [1, 3])
def test_batched_search_needs_one_prefix_or_constraint_list_per_source(tiny_checkpoint, per_sentence, count):
    """Two sources: one list is not one per source (was an IndexError), three are not either
    (the third was ignored without a word)."""
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    sources = t.encode(["der hund", "blau"])[0]
    with pytest.raises(ValueError, match=rf"^{per_sentence}: {count} lists for 2 sources$"):
        BatchedSearch(SearchOptions(beam=2, max_len_a=0, max_len_b=4)).sources(
            t.model, sources, SentenceInputs(**{per_sentence: [[]] * count})
        )


@pytest.fixture(scope="module")
def ct2_translator(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint exported by `nmt export ctranslate2`, loaded with that engine."""
    pytest.importorskip("ctranslate2", reason="ctranslate2 not installed (pip install 'nmt[ct2]')")
    from nmt.cli import main

    out = tmp_path_factory.mktemp("ct2") / "export"
    assert main(["export", "ctranslate2", str(tiny_checkpoint), str(out)]) == 0
    return Translator.load(out, engine="ctranslate2", precision="fp32")


@pytest.mark.parametrize(
    "option, message",
    [
        (dict(beam=0), r"beam=0: must be an integer >= 1"),
        (dict(beam=2.5), r"beam=2.5: must be an integer >= 1"),
        (dict(beam=1, nbest=2), r"nbest=2: must be between 1 and beam=1"),
        (dict(max_len_a=float("nan")), r"max_len_a=nan, max_len_b=50: must be finite"),
        (dict(max_len_b=float("inf")), r"max_len_a=1.0, max_len_b=inf: must be finite"),
    ],
)
@pytest.mark.parametrize("lines", [["", " "], ["der hund"]])
def test_the_ctranslate2_engine_checks_search_options_as_the_torch_engine(
    tiny_checkpoint, ct2_translator, lines, option, message
):
    """Same ValueError from both engines, also for a batch of empty lines (ctranslate2 was:
    CTranslate2's own ValueError or a TypeError, and no error at all for empty lines)."""
    torch_translator = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    for t in (torch_translator, ct2_translator):
        with pytest.raises(ValueError, match=message):
            t.translate_nbest(lines, **option)


def test_search_options_as_one_value_or_as_keywords_translate_alike(tiny_checkpoint):
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    lines = ["der hund", "blau", "die katze schlaeft"]
    options = SearchOptions(beam=3, alpha=0.8, nbest=2, max_len_b=5)
    by_value = t.translate_nbest(lines, options)
    by_keywords = t.translate_nbest(lines, beam=3, alpha=0.8, nbest=2, max_len_b=5)
    assert [[(h.text, h.score) for h in hs] for hs in by_value] == [
        [(h.text, h.score) for h in hs] for hs in by_keywords
    ]
    assert t.translate_sentences(lines, options) == [hs[0].text for hs in by_value]
    with pytest.raises(TypeError, match="not search options"):
        t.translate_sentences(lines, beams=3)


def test_a_loaded_translator_knows_the_longest_sentences_its_model_learned_from(finished_tiny_run, tiny_data):
    from nmt.data.dataset import load_meta
    from nmt.realtext.job import TextOptions

    words = load_meta(tiny_data)["splits"]["train"]["src_words"]
    translator = Translator.load(finished_tiny_run)
    assert (translator.source_words.longest, translator.source_words.p99) == (words["longest"], words["p99"])
    assert TextOptions().for_model(translator) == TextOptions(
        max_words=words["longest"], part_words=words["p99"]
    )


def test_target_text_is_segmented_with_the_checkpoints_target_model(imported_marian, tiny_checkpoint):
    """A checkpoint with its own target_spm.model (an imported Marian model's target.spm, trained on
    German where its source.spm was trained on English): prefixes and constraints are target text,
    segmented as MarianTokenizer segments targets, in pieces the source model never produces; a
    checkpoint with one model uses it for both sides."""
    from import_fixtures import SENTENCES, TARGETS, marian_target_pieces

    hf, ckpt = imported_marian
    t = Translator.load(ckpt, device="cpu", precision="fp32")
    lines = TARGETS[:12]
    prefix = t.prefix_ids(lines, n_sentences=len(lines))
    assert [[t.sp.id_to_piece(i) for i in ids] for ids in prefix] == marian_target_pieces(hf, lines)
    as_sources = {p for line in lines for p in t.sp.encode(line, out_type=str)}
    assert not {t.sp.id_to_piece(i) for ids in prefix for i in ids} & as_sources  # target-only pieces
    sources = t.encode(SENTENCES[:2])[0]
    word = TARGETS[0].split()[0]  # "eulben": one piece of target.spm, seven of source.spm
    assert t.constraint_ids(sources, [[word], []]) == [[[t.sp.piece_to_id("▁" + word)]], []]
    out = t.translate_nbest(SENTENCES[:1], prefix=[TARGETS[1]], beam=1, max_len_a=0, max_len_b=20)
    assert out[0][0].tokens[: len(prefix[1])] == prefix[1]
    one = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    assert one.tgt_sp is one.sp
