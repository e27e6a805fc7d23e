"""Conventions with one definition that preparation, training and translation share: text
cleaning (control characters), the special token ids, the label-smoothing kind, the greedy
default alpha (API and CLI), what the Python API accepts as input, `--threads`, and the one
length batcher."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from translate_fixtures import make_checkpoint

from nmt import vocab
from nmt.cli import main as nmt_main

FAST = ("--max-len-a", "0", "--max-len-b", "3", "--quiet")


# ----------------------------------------------------------------------------- text cleaning
def test_clean_line_turns_control_characters_into_spaces(tmp_path):
    """A "\\r" (or another control character) inside a line is not part of the sentence: every
    C0/C1 control, DEL and U+2028/2029 is one space, U+FEFF is removed, and `nmt prepare` counts the
    sentences it changed."""
    from nmt.data.lines import clean_line, read_lines
    from nmt.data.prepare import PrepareOptions, format_report, prepare

    assert clean_line("first half\rsecond half") == "first half second half"
    assert clean_line(" a\tb\x00c\x0bd\x1fe\x7ff\x85g\u2028h\u2029i \r") == "a b c d e f g h i"
    assert clean_line("\ufeffder hund") == "der hund" and clean_line("zw\ufeffei") == "zwei"
    assert clean_line("\u200d\u202eabc\u202c e\u0301") == "\u200d\u202eabc\u202c \u00e9"  # kept; NFC
    words = "ein hund und eine katze laufen auf der strasse".split()
    train = [" ".join(words[i % 5 : i % 5 + 4]) for i in range(60)]
    valid_src = ["first half\rsecond half", "plain", "a\x00b", "c\u2028d"]
    valid_tgt = ["erste\rzweite", "einfach", "x", "y"]
    for name, lines in (
        ("train.en", train),
        ("train.de", train),
        ("valid.en", valid_src),
        ("valid.de", valid_tgt),
    ):
        (tmp_path / name).write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    splits = {s: (tmp_path / f"{s}.en", tmp_path / f"{s}.de") for s in ("train", "valid")}
    meta = prepare(
        splits,
        tmp_path / "data",
        log=lambda *a: None,
        options=PrepareOptions(dataset="files", src_lang="en", tgt_lang="de", vocab_size=60),
    )
    assert list(read_lines(tmp_path / "data" / "valid.en.txt")) == [
        "first half second half",
        "plain",
        "a b",
        "c d",
    ]
    assert list(read_lines(tmp_path / "data" / "valid.de.txt"))[0] == "erste zweite"
    assert meta["cleaning"]["valid"]["control_chars"] == 4  # sentences changed, both sides
    assert meta["cleaning"]["train"]["control_chars"] == 0
    report = format_report(meta).splitlines()
    assert "control chars 4" in next(r for r in report if r.startswith("valid"))


# ----------------------------------------------------------------------------- special token ids
def test_special_ids_have_one_source(tmp_path, tiny_checkpoint, capsys):
    """The special ids have one source, nmt.vocab: ModelConfig has no pad_id (config.json files
    with pad_id 0 load), the model, collate and the loss read nmt.vocab, and training and translation
    reject data / checkpoints whose recorded special ids differ, naming the file."""
    from nmt.config import ConfigError, ModelConfig, apply_overrides, from_dict, tiny, to_dict
    from nmt.data.batching import collate
    from nmt.model import Transformer
    from nmt.train.loss import label_smoothed_nll_loss

    assert "pad_id" not in to_dict(tiny(50))
    old = {**to_dict(tiny(50)), "pad_id": 0}  # config.json written before the change
    assert from_dict(ModelConfig, old) == tiny(50)
    with pytest.raises(ConfigError, match=r"model\.pad_id=1: padding is token 0"):
        from_dict(ModelConfig, {**old, "pad_id": 1})
    with pytest.raises(ConfigError, match=r"model\.pad_id"):
        apply_overrides(tiny(50), {"pad_id": "1"}, section="model")

    torch.manual_seed(0)
    model = Transformer(tiny(50)).eval()
    src = torch.tensor([[5, 6, 3, vocab.PAD], [7, 3, vocab.PAD, vocab.PAD]])
    assert torch.equal(model.encode(src).padding_mask, src.eq(vocab.PAD))
    batch = collate([(np.array([5, 6]), np.array([7])), (np.array([5]), np.array([8, 9, 10]))])
    assert (
        batch.src[1, -1] == vocab.PAD and batch.tgt_in[0, 0] == vocab.BOS and batch.tgt_out[0, 1] == vocab.EOS
    )
    logits = torch.randn(2, 4, 50)
    _, _, n = label_smoothed_nll_loss(logits, batch.tgt_out, epsilon=0.1)
    assert n == batch.n_tgt_tokens == 6  # the default ignore_index is nmt.vocab.PAD
    with pytest.raises(TypeError):
        collate([(np.array([5]), np.array([6]))], pad=1)  # no second source of the padding id

    # training: a prepared DATA_DIR whose meta.json records other ids
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.json").write_text(
        json.dumps({"vocab_size": 50, "splits": {}, "special_ids": {"pad": 1, "unk": 0, "bos": 2, "eos": 3}})
    )
    assert nmt_main(["train", str(data), "--out", str(tmp_path / "run"), "--preset", "tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nmt train: error: ") and str(data / "meta.json") in err[0]
    assert "special token ids" in err[0] and not (tmp_path / "run").exists()

    # translation: a checkpoint whose config.json (the data's meta) or spm.model disagree
    bad = tmp_path / "bad_ckpt"
    shutil.copytree(tiny_checkpoint, bad)
    config = json.loads((bad / "config.json").read_text())
    config["data"] = {"special_ids": {"pad": 1, "unk": 0, "bos": 2, "eos": 3}}
    (bad / "config.json").write_text(json.dumps(config))
    manifest = json.loads((bad / "MANIFEST.json").read_text())
    import hashlib

    manifest["config.json"] = {
        "sha256": hashlib.sha256((bad / "config.json").read_bytes()).hexdigest(),
        "bytes": (bad / "config.json").stat().st_size,
    }
    (bad / "MANIFEST.json").write_text(json.dumps(manifest))
    (tmp_path / "in.txt").write_text("der hund\n")
    out = tmp_path / "out.txt"
    assert nmt_main(["translate", str(bad), "-i", str(tmp_path / "in.txt"), "-o", str(out), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad / "config.json") in err[0] and "special token ids" in err[0]
    other = make_checkpoint(tmp_path / "spm_ids", spm_ids=(3, 0, 1, 2))
    assert nmt_main(["translate", str(other), "-i", str(tmp_path / "in.txt"), "-o", str(out), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(other / "spm.model") in err[0] and not out.exists()


# ----------------------------------------------------------------------------- label smoothing
@pytest.mark.parametrize("kind", ["uniform", "fairseq"])
def test_label_smoothing_kinds_by_hand(kind):
    """nmt's smoothing is Szegedy et al.'s (every token eps/W); tensor2tensor / fairseq give the
    gold token exactly 1 - eps and the others eps/(W-1): a named TrainConfig option chooses."""
    from nmt.config import ConfigError, TrainConfig
    from nmt.train.loss import label_smoothed_nll_loss

    logits = torch.tensor([[[1.0, 2.0, 0.5, -1.0, 0.3], [0.0, 0.0, 3.0, 1.0, -2.0], [2.0] * 5]])  # (1, 3, 5)
    target = torch.tensor([[1, 2, vocab.PAD]])
    eps, w = 0.1, 5
    expected = 0.0
    for pos, y in ((0, 1), (1, 2)):
        row = logits[0, pos].tolist()
        log_z = math.log(sum(math.exp(v) for v in row))
        if kind == "uniform":
            q = [eps / w + (1 - eps if c == y else 0.0) for c in range(w)]
        else:
            q = [1 - eps if c == y else eps / (w - 1) for c in range(w)]
        assert sum(q) == pytest.approx(1.0)
        expected += -sum(qc * (v - log_z) for qc, v in zip(q, row))
    loss, _, n = label_smoothed_nll_loss(logits, target, epsilon=eps, kind=kind)
    assert n == 2 and loss.item() == pytest.approx(expected, rel=1e-6)
    assert TrainConfig(label_smoothing_kind=kind).validate().label_smoothing_kind == kind
    assert TrainConfig().label_smoothing_kind == "uniform"
    with pytest.raises(ConfigError, match="label_smoothing_kind"):
        TrainConfig(label_smoothing_kind="t2t").validate()

    # the training loop passes the option to the loss
    from types import SimpleNamespace

    from nmt.config import tiny
    from nmt.data.batching import collate
    from nmt.model import Transformer
    from nmt.train.trainer import Trainer

    torch.manual_seed(0)
    model = Transformer(tiny(20)).eval()
    batch = collate([(np.array([5, 6, 7]), np.array([8, 9])), (np.array([4]), np.array([10, 11, 12]))])
    losses = {}
    for k in ("uniform", "fairseq"):
        fake = SimpleNamespace(
            device=torch.device("cpu"), amp_dtype=None, cfg=TrainConfig(label_smoothing_kind=k)
        )
        with torch.no_grad():
            losses[k] = Trainer.forward_loss(fake, model, batch)[0].item()
            direct = label_smoothed_nll_loss(
                model(batch.src, batch.tgt_in), batch.tgt_out, epsilon=0.1, kind=k
            )
        assert losses[k] == pytest.approx(direct[0].item(), rel=1e-6)
    assert losses["uniform"] != pytest.approx(losses["fairseq"], rel=1e-9)


# ----------------------------------------------------------------------------- greedy default alpha
def test_beam_one_is_greedy_in_api_and_cli(tiny_checkpoint, tmp_path, monkeypatch):
    """Translator.translate(beam=1) and the CLI share one default (default_alpha: 0 for beam 1,
    the paper's 0.6 otherwise)."""
    import nmt.infer.translate as tr

    seen = []
    real = tr.beam_search

    def recording(model, src, options, **kwargs):
        seen.append((options.beam, options.penalty))
        return real(model, src, options, **kwargs)

    monkeypatch.setattr(tr, "beam_search", recording)
    t = tr.Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    t.translate(["der hund"], beam=1, max_len_a=0, max_len_b=3)
    t.translate_nbest(["der hund"], beam=4, max_len_a=0, max_len_b=3)
    (tmp_path / "in.txt").write_text("der hund\n")
    assert (
        nmt_main(["translate", str(tiny_checkpoint), "-i", str(tmp_path / "in.txt"), "--beam", "1", *FAST])
        == 0
    )
    assert seen == [(1, 0.0), (4, 0.6), (1, 0.0)]


# ----------------------------------------------------------------------------- Python API input, --threads
def test_python_api_str_none_bom_and_line_numbers(tiny_checkpoint):
    """The Python API translates a str as one sentence, refuses [None] with a TypeError naming
    the position, removes a BOM, and counts sentences from 1, as the CLI does."""
    from nmt.infer.translate import Translator

    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    kw = dict(beam=2, max_len_a=0, max_len_b=3)
    one = t.translate("der hund", **kw)
    assert isinstance(one, str) and [one] == t.translate(["der hund"], **kw)
    assert t.translate("\ufeffder hund", **kw) == one
    assert [x.text for x in t.translate_nbest("der hund", nbest=2, **kw)] == [
        x.text for x in t.translate_nbest(["der hund"], nbest=2, **kw)[0]
    ]
    with pytest.raises(TypeError, match="text 2: expected str, got NoneType"):
        t.translate(["der hund", None], **kw)
    with pytest.raises(TypeError, match="expected a str or a list of str"):
        t.translate(42, **kw)
    with pytest.warns(UserWarning, match=r"^line 2: 300 pieces, truncated to 255"):
        t.translate_sentences(["der hund", " ".join(["katze"] * 300)], beam=1, max_len_a=0, max_len_b=2)


def test_translate_threads_option(tiny_checkpoint, tmp_path):
    """`nmt translate --threads N` sets torch's intra-op threads."""
    (tmp_path / "in.txt").write_text("der hund\n")
    before = torch.get_num_threads()
    try:
        assert (
            nmt_main(
                [
                    "translate",
                    str(tiny_checkpoint),
                    "-i",
                    str(tmp_path / "in.txt"),
                    "-o",
                    str(tmp_path / "out.txt"),
                    "--threads",
                    "2",
                    *FAST,
                ]
            )
            == 0
        )
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert len((tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()) == 1


# ----------------------------------------------------------------------------- one length batcher
def test_one_length_batcher_for_training_and_translation():
    """One concept, one place: translation's make_batches lives in nmt/data/batching.py and cuts
    with the training packer `pack` (it was a second greedy loop in translate.py)."""
    import nmt.infer.translate as tr
    from nmt.data import batching

    assert tr.make_batches is batching.make_batches
    lengths = [3, 10, 1, 7, 7, 2]
    order = np.array([1, 3, 4, 0, 5, 2])  # longest first, ties in input order
    sizes = np.array(lengths)
    for budget, cap in ((15, None), (10**6, 4), (14, 2)):
        got = batching.make_batches(lengths, batch_tokens=budget, max_sentences=cap)
        assert got == batching.pack(order, sizes, sizes, max_tokens=budget, max_sentences=cap)
        assert all(len(b) * max(lengths[i] for i in b) <= budget or len(b) == 1 for b in got)
        assert cap is None or all(len(b) <= cap for b in got)
    assert batching.make_batches(lengths, batch_tokens=10**6, max_sentences=4) == [[1, 3, 4, 0], [5, 2]]
