"""nmt.data.prepare: the `nmt prepare` pipeline end to end: errors on its inputs and output (nothing
half-written), the train filters and untouched valid/test splits, the format and determinism of
what it writes, real corpora, BPE-dropout segmentations. Reading and cleaning text are tested in
test_lines.py, the vocabulary in test_bpe.py, reading a prepared directory back in test_dataset.py.
"""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import corpus, leftovers, parse, prepare_files, prepare_train_files, write

from nmt.atomic import sha256_file
from nmt.cli import main
from nmt.data import binarize
from nmt.data import command as data_command
from nmt.data.batching import TokenBatchSampler
from nmt.data.dataset import ParallelDataset, load_meta
from nmt.data.download import DataError
from nmt.data.lines import clean_line, read_lines
from nmt.data.prepare import source_words
from nmt.vocab import BOS, EOS, PAD, UNK, load_spm


# ------------------------------------------------------------------------------- input and output errors
def test_an_input_that_cannot_be_opened_is_an_error_naming_it(tmp_path):
    """Not only a missing file: a path through a file (NotADirectoryError; or a PermissionError)
    was an internal error from the checksum of the inputs."""
    tgt = write(tmp_path / "ok.de", ["a", "b"])
    bad = tmp_path / "ok.de" / "train.en"
    with pytest.raises(DataError, match=rf"cannot read {bad}: .*Not a directory"):
        prepare_train_files(tmp_path, bad, tgt)
    assert leftovers(tmp_path) == []


def test_mismatch_in_test_split_removes_everything(tmp_path):
    """A late error (after the vocabulary was trained) still leaves no output."""
    src, tgt = corpus(200)
    with pytest.raises(DataError, match="line count mismatch"):
        prepare_files(tmp_path, (src, tgt), test=(["x", "y"], ["x"]))
    assert leftovers(tmp_path) == []


def test_out_exists_needs_force(tmp_path):
    src, tgt = corpus(100)
    prepare_files(tmp_path, (src, tgt))
    with pytest.raises(DataError, match="already exists; pass --force"):
        prepare_files(tmp_path, (src, tgt))
    prepare_files(tmp_path, (src, tgt), extra=["--force"])


def test_out_dot_is_the_current_folder(tmp_path, monkeypatch):
    """`--out .` (an empty current folder) was an internal error (os.rename of "." is EBUSY) that
    left a `..old-*` folder behind."""
    src = write(tmp_path / "train.en", corpus(100)[0])
    tgt = write(tmp_path / "train.de", corpus(100)[1])
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    argv = ["files", "--src", "en", "--tgt", "de", "--out", ".", "--vocab-size", "120", "--threads", "1"]
    assert data_command.run_prepare(parse([*argv, "--train", str(src), str(tgt)])) == 0
    assert (tmp_path / "here" / "meta.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_out_that_cannot_be_created_is_an_error_naming_it(tmp_path):
    """--out under a file was an internal error (FileExistsError from mkdir)."""
    src, tgt = corpus(100)
    write(tmp_path / "afile", ["x"])
    with pytest.raises(DataError, match=r"--out .*afile/out: cannot create it"):
        prepare_files(tmp_path, (src, tgt), out="afile/out")


def test_a_full_disk_is_an_error_and_keeps_the_previous_output(tmp_path, monkeypatch):
    """OSError while writing (ENOSPC) was an internal error; the earlier preparation stays whole."""
    src, tgt = corpus(100)
    out = prepare_files(tmp_path, (src, tgt))
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(binarize, "write_offsets", full)
    with pytest.raises(DataError, match=r"out: preparing it failed: \[Errno 28\] No space left on device"):
        prepare_files(tmp_path, (src, tgt), extra=["--force"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert leftovers(tmp_path) == ["out"]


@pytest.mark.parametrize("dataset, src, tgt", [("multi30k", "en", "de"), ("libreoffice", "en", "zh")])
@pytest.mark.parametrize("split", ["train", "valid", "test"])
def test_splits_given_to_a_corpus_with_its_own_are_refused(tmp_path, dataset, src, tgt, split):
    """multi30k and libreoffice silently used their own split instead of a given --train/--valid/--test."""
    a, b = write(tmp_path / "my.en", ["a"]), write(tmp_path / "my.de", ["b"])
    argv = [dataset, "--src", src, "--tgt", tgt, "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path)]
    argv += ["--base-url", "http://127.0.0.1:9", f"--{split}", str(a), str(b)]
    with pytest.raises(
        DataError, match=rf"--{split}: {dataset} brings its own splits; .*`nmt prepare files`"
    ):
        data_command.run_prepare(parse(argv))


def test_files_needs_train():
    with pytest.raises(DataError, match="--train"):
        data_command.run_prepare(parse(["files", "--src", "en", "--tgt", "de", "--out", "x"]))


# ------------------------------------------------------------------------------- filters
def test_train_filters_reported(tmp_path):
    src, tgt = corpus(300)
    long = " ".join(["man"] * 40)
    src[:6] = ["", "dog", "  ", long, "a", "a"]
    tgt[:6] = ["hund", "", "x", long, long, "man man man man man man man"]
    out = prepare_files(tmp_path, (src, tgt), extra=["--max-len", "30", "--max-ratio", "3"])
    meta = load_meta(out)
    c = meta["cleaning"]["train"]
    assert c["read"] == 300
    assert c["dropped"]["empty"] == 3 and c["dropped"]["too_long"] == 2
    assert c["dropped"]["ratio"] >= 1
    assert c["dropped"]["empty"] + c["dropped"]["too_long"] + c["dropped"]["ratio"] == 300 - c["kept"]
    assert c["kept"] == meta["splits"]["train"]["pairs"] == len(ParallelDataset.load(out, "train"))
    ds = ParallelDataset.load(out, "train")
    assert ds.src_lengths.max() <= 30 and ds.tgt_lengths.max() <= 30
    ratio = np.maximum(ds.src_lengths, ds.tgt_lengths) / np.maximum(
        1, np.minimum(ds.src_lengths, ds.tgt_lengths)
    )
    assert ratio.max() <= 3


def test_the_training_sources_lengths_in_words_are_recorded_over_the_kept_pairs(tmp_path):
    src, tgt = corpus(300)
    src[0] = tgt[0] = " ".join(["man"] * 60)  # dropped by --max-len: not counted
    out = prepare_files(tmp_path, (src, tgt), extra=["--max-len", "50"])
    kept = np.array([len(s.split()) for s in src[1:]])
    words = load_meta(out)["splits"]["train"]["src_words"]
    assert words == {"longest": int(kept.max()), "p99": int(np.percentile(kept, 99, method="higher"))}
    assert 3 <= words["p99"] <= words["longest"] <= 12
    zh = tmp_path / "train.zh"
    zh.write_text("两只狗在雪地里玩耍。\n一个 男人 在 骑 自行车 。\n", encoding="utf-8")
    assert source_words(zh, None, src_lang="zh-Hans") is None  # words are not spaced: no record
    assert source_words(zh, None, src_lang="en") == {"longest": 6, "p99": 6}


def test_valid_and_test_untouched(tmp_path):
    """Never filtered or reordered: empty, too long and odd-ratio lines all stay, in order."""
    src, tgt = corpus(300)
    long = " ".join(["man"] * 40)
    vsrc = ["the dog", "", long, "a", " red ball "]
    vtgt = ["der hund", "leer", "klein", long, "roter ball"]
    out = prepare_files(
        tmp_path,
        (src, tgt),
        valid=(vsrc, vtgt),
        test=(vtgt, vsrc),
        extra=["--max-len", "10", "--max-ratio", "2"],
    )
    sp = load_spm(out)
    for split, (s, t) in (("valid", (vsrc, vtgt)), ("test", (vtgt, vsrc))):
        ds = ParallelDataset.load(out, split)
        assert len(ds) == 5
        want_s, want_t = [x.strip() for x in s], [x.strip() for x in t]
        assert (out / f"{split}.en.txt").read_text().splitlines() == want_s
        assert (out / f"{split}.de.txt").read_text().splitlines() == want_t
        assert [sp.decode(ds[i][0].tolist()) for i in range(5)] == want_s
        assert [sp.decode(ds[i][1].tolist()) for i in range(5)] == want_t
        c = load_meta(out)["cleaning"][split]
        assert c["kept"] == 5 and c["empty_kept"] == 1 and c["dropped"] == {"empty": 0}


# ------------------------------------------------------------------------------- format
def test_format_special_ids_determinism(tmp_path):
    src, tgt = corpus(300)
    a = prepare_files(tmp_path, (src, tgt), valid=(src[:7], tgt[:7]), out="a")
    b = prepare_files(tmp_path, (src, tgt), valid=(src[:7], tgt[:7]), out="b")
    for name in (
        "spm.model",
        "spm.vocab",
        "train.src.bin",
        "train.tgt.bin",
        "train.src.offsets.npy",
        "valid.tgt.bin",
    ):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    sp = load_spm(a)
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (0, 1, 2, 3)
    assert (PAD, UNK, BOS, EOS) == (0, 1, 2, 3)
    meta = load_meta(a)
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == sp.get_piece_size() <= 120
    assert meta["recipe"]["vocab_size"] == 120 and meta["recipe"]["max_len"] == 250
    assert meta["inputs"]["train"]["tgt"]["sha256"] == sha256_file(tmp_path / "train.de")
    assert meta["splits"]["valid"]["pairs"] == 7
    # raw layout: ids back to back, offsets int64 [n + 1]
    ids = np.fromfile(a / "train.src.bin", dtype=np.uint16)
    offsets = np.load(a / "train.src.offsets.npy")
    assert offsets.dtype == np.int64 and offsets[0] == 0 and offsets[-1] == len(ids)
    ds = ParallelDataset.load(a, "train")
    assert np.array_equal(ds[3][0], ids[offsets[3] : offsets[4]]) and ds[3][0].dtype == np.int64
    assert sp.decode(ds[3][0].tolist()) == src[3] and sp.decode(ds[3][1].tolist()) == tgt[3]
    clone = pickle.loads(pickle.dumps(ds))  # DataLoader workers
    assert np.array_equal(clone[5][1], ds[5][1])
    with pytest.raises(DataError, match="no split 'test'"):
        ParallelDataset.load(a, "test")


# ------------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def multi30k_prepared(multi30k_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("m30k") / "en-de"
    argv = ["multi30k", "--src", "en", "--tgt", "de", "--out", str(out), "--data-dir", str(multi30k_dir)]
    assert data_command.run_prepare(parse(argv)) == 0
    return out


def test_multi30k_decodes_to_original(multi30k_prepared, multi30k_dir):
    out, raw = multi30k_prepared, multi30k_dir / "multi30k"
    meta = load_meta(out)
    assert meta["vocab_size"] == 8000 and meta["dtype"] == "uint16"
    assert {s: meta["splits"][s]["pairs"] for s in meta["splits"]} == {
        "train": 29000,
        "valid": 1014,
        "test": 1000,
    }
    sp = load_spm(out)
    rng = np.random.default_rng(0)
    for split in ("train", "valid", "test"):
        ds = ParallelDataset.load(out, split)
        src = [clean_line(x) for x in read_lines(raw / f"{split}.en.gz")]
        tgt = [clean_line(x) for x in read_lines(raw / f"{split}.de.gz")]
        assert len(ds) == len(src) == len(tgt)
        for i in rng.choice(len(ds), size=200, replace=False):
            s, t = ds[i]
            if split != "train" and (UNK in s or UNK in t):
                continue  # a character never seen in train
            assert sp.decode(s.tolist()) == src[i] and sp.decode(t.tolist()) == tgt[i]
        if split != "train":  # the references are the cleaned originals, in order
            assert (out / f"{split}.de.txt").read_text(encoding="utf-8").splitlines() == tgt


def test_multi30k_padding_under_10_percent(multi30k_prepared):
    ds = ParallelDataset.load(multi30k_prepared, "train")
    sampler = TokenBatchSampler(
        src_lengths=ds.src_lengths, tgt_lengths=ds.tgt_lengths, max_tokens=4096, seed=1
    )
    s, t = ds.src_lengths + 1, ds.tgt_lengths + 1
    padded = sum(len(b) * (s[b].max() + t[b].max()) for b in sampler.batches(0))
    assert 1 - (s.sum() + t.sum()) / padded < 0.10


def test_wmt14_local_test_sets_with_user_train(shared_data_dir, tmp_path):
    if not (shared_data_dir / "wmt14_en_de" / "test.en.gz").is_file():
        pytest.skip(f"no wmt14_en_de test sets in {shared_data_dir}")
    src, tgt = corpus(300)
    s, t = write(tmp_path / "tr.en", src), write(tmp_path / "tr.de", tgt)
    argv = [
        "wmt14",
        "--src",
        "de",
        "--tgt",
        "en",
        "--out",
        str(tmp_path / "out"),
        "--data-dir",
        str(shared_data_dir),
        "--vocab-size",
        "300",
        "--threads",
        "1",
        "--base-url",
        "http://127.0.0.1:9",
        "--train",
        str(t),
        str(s),
    ]
    data_command.run_prepare(parse(argv))
    meta = load_meta(tmp_path / "out")
    assert {k: v["pairs"] for k, v in meta["splits"].items()} == {"train": 300, "valid": 3000, "test": 3003}
    assert meta["src_lang"] == "de" and meta["downloads"] == {}


# ------------------------------------------------------------------------------- BPE-dropout
def test_bpe_dropout_copies_are_sampled_segmentations_of_the_kept_pairs(tmp_path, monkeypatch):
    """`--bpe-dropout P`: K copies of train, the same kept pairs in the same order (over several
    encoding chunks with dropped pairs inside them), each side decoding to the same text,
    segmented into more (smaller) pieces, the usual pieces where a sample would pass --max-len;
    deterministic by seed."""
    monkeypatch.setattr(binarize, "CHUNK", 7)
    src, tgt = corpus(300)
    long = " ".join(["man"] * 40)
    near = " ".join(["man"] * 27) + " ball"  # at most --max-len pieces, a sample would be longer
    for i in (0, 9, 15, 22):  # dropped pairs in several chunks
        src[i], tgt[i] = long, long
    src[1:3] = ["a", "the dog"]
    tgt[1:3] = ["man man man man man man man", "der hund"]  # ratio: dropped
    src[30], tgt[30] = near, " ".join(["mann"] * 27) + " ball"
    extra = ["--max-len", "30", "--max-ratio", "3", "--bpe-dropout", "0.3", "--bpe-dropout-copies", "3"]
    a = prepare_files(tmp_path, (src, tgt), out="a", extra=extra)
    b = prepare_files(tmp_path, (src, tgt), out="b", extra=extra)
    meta = load_meta(a)
    train = ParallelDataset.load(a, "train")
    samples = meta["train_samples"]
    assert samples["splits"] == ["train.bpe1", "train.bpe2", "train.bpe3"]
    assert samples["bpe_dropout"] == 0.3 and samples["pairs"] == len(train) == 300 - 5
    near_index = 30 - 5  # five pairs before it dropped
    sp = load_spm(a)
    assert sp.decode(train[near_index][0].tolist()) == near and len(train[near_index][0]) <= 30
    copies = [ParallelDataset(a, name, meta) for name in samples["splits"]]
    for k, copy in enumerate(copies):
        assert len(copy) == len(train)
        for i in range(len(train)):
            for side in (0, 1):
                assert sp.decode(copy[i][side].tolist()) == sp.decode(train[i][side].tolist())
        assert copy.src_lengths.sum() == samples["src_tokens"][k] > train.src_lengths.sum()
        assert copy.tgt_lengths.sum() == samples["tgt_tokens"][k] > train.tgt_lengths.sum()
        assert copy.src_lengths.max() <= 30 and copy.tgt_lengths.max() <= 30  # --max-len holds
        assert np.array_equal(copy[near_index][0], train[near_index][0])  # its sample was too long
        assert np.array_equal(copy[near_index][1], train[near_index][1])
    assert not np.array_equal(copies[0].src_lengths, copies[1].src_lengths)  # different samples
    for name in ("train.src.bin", "train.bpe1.src.bin", "train.bpe3.tgt.bin", "train.bpe2.tgt.offsets.npy"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    plain = prepare_files(tmp_path, (src, tgt), out="plain", extra=extra[:4])
    assert (plain / "train.src.bin").read_bytes() == (a / "train.src.bin").read_bytes()
    assert "train_samples" not in load_meta(plain)
    assert not list(plain.glob("train.bpe*"))


SAMPLE_IN_A_NEW_PROCESS = """
import sys
from pathlib import Path
from pathlib import Path
import numpy as np
from nmt.data import binarize
from nmt.vocab import load_spm
data, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir()
files = (data.parent / "train.en", data.parent / "train.de.txt")
binarize.binarize_samples(load_spm(data), files, out, binarize.BPEDropout(p=0.3, copies=2, seed=5),
                          keep=np.ones(60, bool), max_len=1000, dtype=np.dtype("uint16"))
"""


def test_bpe_dropout_samples_are_the_same_bytes_in_every_process(tmp_path):
    """The same seed writes the same `train.bpe*` files in separate processes (sentencepiece's own
    sampler, seeded, repeats only within one process: an absl::BitGen salts its seed per process)."""
    src, tgt = corpus(60)
    data_dir = prepare_files(tmp_path, (src, tgt))
    write(tmp_path / "train.de.txt", tgt)
    outs = [tmp_path / f"run{i}" for i in range(2)]
    for out in outs:
        subprocess.run([sys.executable, "-c", SAMPLE_IN_A_NEW_PROCESS, str(data_dir), str(out)], check=True)
    names = sorted(path.name for path in outs[0].iterdir())
    assert names == [
        f"train.bpe{k}.{side}.{ext}"
        for k in (1, 2)
        for side in ("src", "tgt")
        for ext in ("bin", "offsets.npy")
    ]
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    usual = ParallelDataset.load(data_dir, "train")
    sampled = np.fromfile(outs[0] / "train.bpe1.tgt.bin", dtype=np.uint16)
    assert len(sampled) > usual.tgt_lengths.sum()  # sampled: more, smaller pieces


@pytest.mark.parametrize(
    "extra",
    [
        ["--bpe-dropout", "1.0"],
        ["--bpe-dropout", "-0.1"],
        ["--bpe-dropout-copies", "3"],
        ["--bpe-dropout", "0.1", "--bpe-dropout-copies", "0"],
        ["--bpe-dropout", "0.1", "--bpe-dropout-copies", "-1"],
    ],
)
def test_bad_bpe_dropout_options_are_refused(tmp_path, extra):
    with pytest.raises(DataError, match="--bpe-dropout"):
        prepare_files(tmp_path, corpus(50), extra=extra)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------- the SentencePiece loader
def test_the_one_spm_loader_names_a_missing_or_unreadable_spm_model(tmp_path):
    """`nmt.vocab.load_spm` loads the spm.model of a DATA_DIR or a checkpoint; a missing or garbage
    file is a ValueError naming it (each layer raises it as its own error: CheckpointError, ...)."""
    with pytest.raises(ValueError, match="not a readable SentencePiece model") as e:
        load_spm(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'spm.model'}: ")
    (tmp_path / "spm.model").write_bytes(b"\x00 not a model")
    with pytest.raises(ValueError, match="not a readable SentencePiece model") as e:
        load_spm(tmp_path)
    assert str(e.value).startswith(f"{tmp_path / 'spm.model'}: ")


def test_the_target_sides_model_is_target_spm_model_where_there_is_one_on_the_same_pieces(
    imported_marian, tiny_checkpoint, tmp_path
):
    """`load_spm(DIR, side="target")`: DIR's target_spm.model (an imported Marian model's), else its
    spm.model (the same processor when it is given as ``source``); a target model whose pieces are
    not spm.model's, id for id, is a ValueError naming it."""
    _, ckpt = imported_marian
    target = load_spm(ckpt, side="target")
    assert target.serialized_model_proto() == (ckpt / "target_spm.model").read_bytes()
    assert load_spm(ckpt).serialized_model_proto() == (ckpt / "spm.model").read_bytes()
    one = load_spm(tiny_checkpoint)
    assert load_spm(tiny_checkpoint, side="target", source=one) is one
    assert load_spm(tiny_checkpoint, side="target").serialized_model_proto() == one.serialized_model_proto()
    (tmp_path / "spm.model").write_bytes((tiny_checkpoint / "spm.model").read_bytes())
    (tmp_path / "target_spm.model").write_bytes((ckpt / "target_spm.model").read_bytes())
    with pytest.raises(ValueError, match="not the pieces of") as e:
        load_spm(tmp_path, side="target")
    assert str(e.value).startswith(f"{tmp_path / 'target_spm.model'}: ")
    with pytest.raises(ValueError, match="side 'tgt'"):
        load_spm(tmp_path, side="tgt")


def test_bpe_dropout_refuses_a_byte_fallback_model(tmp_path):
    """BPE-dropout writes <unk> where a byte-fallback model writes byte pieces, so such a model is
    refused, even when the corpus has no unknown character (`nmt prepare` then removes its
    temporary folder: tests of prepare's atomic output)."""
    import sentencepiece as spm

    from nmt.data import binarize

    src, tgt = corpus(60)
    write(tmp_path / "text.txt", src + tgt)
    spm.SentencePieceTrainer.train(
        input=str(tmp_path / "text.txt"),
        model_prefix=str(tmp_path / "bytes"),
        model_type="bpe",
        vocab_size=300,
        byte_fallback=True,
        minloglevel=2,
    )
    write(tmp_path / "train.en", src)
    write(tmp_path / "train.de", tgt)
    out = tmp_path / "out"
    out.mkdir()
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "bytes.model"))
    with pytest.raises(DataError, match="byte-fallback"):
        binarize.binarize_samples(
            sp,
            (tmp_path / "train.en", tmp_path / "train.de"),
            out,
            binarize.BPEDropout(p=0.1, copies=1, seed=1),
            keep=np.ones(60, bool),
            max_len=1000,
            dtype=np.dtype("uint16"),
        )


# ----------------------------------------------------------------------------- long validation pairs
def test_prepare_warns_about_long_valid_pairs(long_valid_data):
    """prepare counts (and keeps) valid/test pairs longer than --max-len."""
    data, lines = long_valid_data
    meta = json.loads((data / "meta.json").read_text())
    assert meta["cleaning"]["valid"]["longer_than_max_len"] == 1
    assert meta["cleaning"]["test"]["longer_than_max_len"] == 0 and meta["splits"]["valid"]["pairs"] == 11
    assert [line for line in lines if line.startswith("warning:")] == [
        "warning: valid: 1 pairs have a side longer than --max-len 100 pieces (kept; validation and "
        "translation truncate them to the model's positions)"
    ]
    from nmt.data.prepare import format_report

    assert "longer than max len 1" in format_report(meta)


def test_prepare_killed_inside_its_swap_gets_the_old_data_back(tmp_path):
    """A kill between prepare's two renames leaves OUT missing and the previous data under
    .OUT.old-*; the next `nmt prepare` puts it back first."""
    import signal

    from train_fixtures import write_corpus

    splits = write_corpus(tmp_path / "text", n_train=60, n_valid=5)
    out = tmp_path / "data"
    argv = [
        "prepare",
        "files",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(out),
        "--train",
        *map(str, splits["train"]),
        "--vocab-size",
        "60",
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    meta = (out / "meta.json").read_text()
    pid = os.fork()
    if pid == 0:  # the second prepare is killed once the old data is aside, before the new is renamed
        real_rename = os.rename

        def rename(src, dst):
            if Path(dst) == out:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_rename(src, dst)

        os.rename = rename
        try:
            main([*argv, "--force", "--seed", "2"])
        finally:
            os._exit(1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGKILL
    assert not out.exists() and len(list(tmp_path.glob(".data.old-*/ckpt"))) == 1
    assert main(argv) == 2  # "already exists": the old data is back, not silently replaced
    assert (out / "meta.json").read_text() == meta
    assert not list(tmp_path.glob(".data.*"))
