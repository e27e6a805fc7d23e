"""nmt.data.bpe: the shared SentencePiece vocabulary of `nmt prepare`: character coverage by
language, and `--spm-model` reusing an earlier vocabulary id for id (or refusing a bad one)."""

import numpy as np
import pytest
from data_fixtures import corpus, parse, prepare_files, write

from nmt.atomic import sha256_file
from nmt.data import command as data_command
from nmt.data.bpe import character_coverage
from nmt.data.dataset import ParallelDataset, load_meta
from nmt.data.download import DataError
from nmt.vocab import load_spm


def test_chinese_character_coverage(tmp_path):
    assert character_coverage(("zh", "en")) == 0.9995
    assert character_coverage(("en", "de")) == 1.0
    assert character_coverage(("ja-JP", "en")) == 0.9995
    rng = np.random.default_rng(0)
    chars = [chr(c) for c in range(0x4E00, 0x4E00 + 300)]
    zh = ["".join(rng.choice(chars, size=rng.integers(5, 20))) + "。" for _ in range(300)]
    en, _ = corpus(300)
    s, t = write(tmp_path / "t.zh", zh), write(tmp_path / "t.en", en)
    argv = [
        "files",
        "--src",
        "zh",
        "--tgt",
        "en",
        "--out",
        str(tmp_path / "out"),
        "--vocab-size",
        "500",
        "--threads",
        "1",
        "--train",
        str(s),
        str(t),
    ]
    data_command.run_prepare(parse(argv))
    meta = load_meta(tmp_path / "out")
    assert meta["spm"]["character_coverage"] == 0.9995
    ds, sp = ParallelDataset.load(tmp_path / "out", "train"), load_spm(tmp_path / "out")
    decoded = [sp.decode(ds[i][0].tolist()) for i in range(50)]
    assert sum(d == z for d, z in zip(decoded, zh)) >= 45  # rare characters may map to unk


def test_spm_model_reuses_a_vocabulary_id_for_id(tmp_path):
    """`--spm-model DIR` (e.g. for distilled targets): the first prepare's SentencePiece model,
    byte for byte, so the same text gets the same ids in both data sets; meta.json says where it
    came from."""
    (tmp_path / "a").mkdir()
    first = prepare_files(tmp_path / "a", corpus(200, seed=1))
    src, tgt = corpus(80, seed=2)
    argv = [
        "files",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(tmp_path / "b"),
        "--threads",
        "1",
        "--train",
        str(write(tmp_path / "t.en", src)),
        str(write(tmp_path / "t.de", tgt)),
        "--valid",
        str(write(tmp_path / "v.en", src[:5])),
        str(write(tmp_path / "v.de", tgt[:5])),
        "--spm-model",
        str(first),
    ]
    assert data_command.run_prepare(parse(argv)) == 0
    second = tmp_path / "b"
    assert (second / "spm.model").read_bytes() == (first / "spm.model").read_bytes()
    meta = load_meta(second)
    assert meta["vocab_size"] == load_meta(first)["vocab_size"]
    assert meta["spm"]["reused_from"] == str(first / "spm.model")
    ids = [ParallelDataset.load(second, "valid")[i][0].tolist() for i in range(5)]
    sp = load_spm(first)
    assert ids == [sp.encode(s) for s in src[:5]]  # the first vocabulary's ids


@pytest.mark.parametrize(
    "spm, extra, message",
    [
        ("missing", [], "no such file"),
        ("text", [], "not a SentencePiece model"),
        ("good", ["--vocab-size", "50"], "do not apply"),
    ],
)
def test_bad_spm_model_is_refused(tmp_path, spm, extra, message):
    (tmp_path / "a").mkdir()
    first = prepare_files(tmp_path / "a", corpus(100))
    path = {
        "missing": tmp_path / "nothing",
        "text": write(tmp_path / "x.model", ["not a model"]),
        "good": first,
    }[spm]
    argv = [
        "files",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(tmp_path / "b"),
        "--threads",
        "1",
        "--train",
        str(write(tmp_path / "t.en", ["a b"])),
        str(write(tmp_path / "t.de", ["c d"])),
        "--spm-model",
        str(path),
        *extra,
    ]
    with pytest.raises(DataError, match=message):
        data_command.run_prepare(parse(argv))
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("neighbour", ['{"another": "tool"}', "{not json", "[1, 2]"])
def test_spm_model_beside_a_meta_json_not_of_nmt_prepare_is_reused(tmp_path, neighbour):
    """The meta.json beside a reused spm.model is read for its "spm" record only if it is an `nmt
    prepare` one: another tool's (or a damaged) meta.json was an internal error (KeyError,
    JSONDecodeError)."""
    (tmp_path / "a").mkdir()
    first = prepare_files(tmp_path / "a", corpus(100))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "spm.model").write_bytes((first / "spm.model").read_bytes())
    (tmp_path / "other" / "meta.json").write_text(neighbour)
    src, tgt = corpus(50)
    train = [str(write(tmp_path / "t.en", src)), str(write(tmp_path / "t.de", tgt))]
    argv = ["files", "--src", "en", "--tgt", "de", "--out", str(tmp_path / "b"), "--threads", "1"]
    argv += ["--train", *train, "--spm-model", str(tmp_path / "other")]
    assert data_command.run_prepare(parse(argv)) == 0
    spm = load_meta(tmp_path / "b")["spm"]
    assert spm["reused_from"] == str(tmp_path / "other" / "spm.model")
    assert spm["character_coverage"] is None


def test_spm_model_of_a_checkpoint_with_a_target_model_encodes_the_targets_with_it(imported_marian, tmp_path):
    """`--spm-model CHECKPOINT` of a checkpoint with its own target_spm.model (an imported Marian
    model: conftest.imported_marian): the data holds both models byte for byte and meta.json the
    target's sha256; sources are encoded as MarianTokenizer encodes sources, targets as it encodes
    targets (target.spm's pieces, which the source model never gives German), so that `nmt train
    --init` learns the segmentation the model was trained on. A target model of other pieces is an
    error naming it, and nothing is written."""
    from import_fixtures import SENTENCES, TARGETS, marian_target_pieces

    hf, ckpt = imported_marian
    src, tgt = SENTENCES[:40], TARGETS[:40]
    files = [str(write(tmp_path / "t.en", src)), str(write(tmp_path / "t.de", tgt))]
    argv = ["files", "--src", "en", "--tgt", "de", "--threads", "1", "--train", *files, "--valid", *files]
    assert (
        data_command.run_prepare(parse([*argv, "--out", str(tmp_path / "d"), "--spm-model", str(ckpt)])) == 0
    )
    for name in ("spm.model", "target_spm.model"):
        assert (tmp_path / "d" / name).read_bytes() == (ckpt / name).read_bytes()
    assert load_meta(tmp_path / "d")["spm"]["target_sha256"] == sha256_file(ckpt / "target_spm.model")
    valid, sp = ParallelDataset.load(tmp_path / "d", "valid"), load_spm(ckpt)
    assert [[sp.id_to_piece(i) for i in valid[k][1].tolist()] for k in range(40)] == marian_target_pieces(
        hf, tgt
    )
    assert [valid[k][0].tolist() for k in range(40)] == [sp.encode(s) for s in src]
    assert [sp.encode(t) for t in tgt] != [valid[k][1].tolist() for k in range(40)]
    other = tmp_path / "other"
    other.mkdir()
    (other / "spm.model").write_bytes((ckpt / "spm.model").read_bytes())
    (other / "target_spm.model").write_bytes((hf / "target.spm").read_bytes())  # Marian's own ids
    with pytest.raises(DataError, match=r"target_spm.model: not the pieces of .*spm.model, id for id"):
        data_command.run_prepare(parse([*argv, "--out", str(tmp_path / "e"), "--spm-model", str(other)]))
    assert not (tmp_path / "e").exists()
