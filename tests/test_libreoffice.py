"""The LibreOffice help corpus (local only, checksummed, shuffled train) and Chinese text."""

import argparse
import gzip
import hashlib

import numpy as np
import pytest

from nmt.data import command as data_command
from nmt.data import download as dl
from nmt.data.dataset import ParallelDataset, load_meta
from nmt.data.download import DataError
from nmt.data.lines import clean_line, read_lines
from nmt.data.prepare import PrepareOptions, prepare
from nmt.vocab import load_spm

ZH = [
    "选择「插入 - 命名区域」，然后单击“确定”。",
    "（可选）输入名称：ＡＢＣ１２３！",
    "设计模式",
    "这是一个测试？是的；全角标点：、。「」『』【】《》——……",
]


def parse(argv):
    parser = argparse.ArgumentParser()
    data_command.add_prepare_args(parser)
    return parser.parse_args(argv)


def test_cleaning_keeps_fullwidth_punctuation_and_chinese():
    for line in ZH:
        assert clean_line(line) == line  # NFC, not NFKC: full-width forms stay
    assert clean_line("  设计模式\t") == "设计模式"


def test_chinese_text_round_trips_through_prepare(tmp_path):
    """No lower-casing, no NFKC: valid text and decoded pieces equal the input, case kept."""
    en = [f"Choose Insert - Named Range, then click OK {i}." for i in range(40)]
    zh = [ZH[i % len(ZH)] + f"第{i}行" for i in range(40)]
    files = {}
    for split in ("train", "valid"):
        for lang, lines in (("en", en), ("zh", zh)):
            files[split, lang] = tmp_path / f"{split}.{lang}"
            files[split, lang].write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    meta = prepare(
        {s: (files[s, "en"], files[s, "zh"]) for s in ("train", "valid")},
        tmp_path / "out",
        options=PrepareOptions(dataset="files", src_lang="en", tgt_lang="zh", vocab_size=200, threads=1),
        log=lambda *a: None,
    )
    assert meta["spm"]["character_coverage"] == 0.9995
    out = tmp_path / "out"
    assert (out / "valid.zh.txt").read_text(encoding="utf-8").splitlines() == zh
    assert (out / "valid.en.txt").read_text(encoding="utf-8").splitlines() == en
    sp = load_spm(out)
    ds = ParallelDataset.load(out, "valid")
    assert [sp.decode(ds[i][1].tolist()) for i in range(len(ds))] == zh
    assert sp.decode(ds[0][0].tolist()) == en[0]


def test_shuffle_train_is_seeded_and_keeps_pairs(tmp_path):
    src = [f"w{i} x{i % 7}" for i in range(200)]
    tgt = [f"v{i} y{i % 7}" for i in range(200)]
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("".join(x + "\n" for x in src))
    b.write_text("".join(x + "\n" for x in tgt))

    def run(name, **kw):
        options = PrepareOptions(
            dataset="files", src_lang="en", tgt_lang="de", vocab_size=300, threads=1, **kw
        )
        prepare({"train": (a, b)}, tmp_path / name, options=options, log=lambda *x: None)
        ds = ParallelDataset.load(tmp_path / name, "train")
        sp = load_spm(tmp_path / name)
        return [(sp.decode(ds[i][0].tolist()), sp.decode(ds[i][1].tolist())) for i in range(len(ds))]

    plain = run("plain")
    assert plain == list(zip(src, tgt))
    s0, s0_again, s1 = (
        run("s0", shuffle_train=True),
        run("s0b", shuffle_train=True),
        run("s1", shuffle_train=True, seed=1),
    )
    assert s0 == s0_again and s0 != plain and s0 != s1
    assert sorted(s0) == sorted(plain)  # same pairs, still aligned
    assert load_meta(tmp_path / "s1")["recipe"]["shuffle_train"] is True


def fake_libreoffice(root, pair="en-zh", n=30):
    folder = root / "libreoffice_help" / pair
    folder.mkdir(parents=True)
    sums = {}
    for split in ("train", "valid", "test"):
        for lang in pair.split("-"):
            text = "".join(f"{lang} {split} line {i}\n" for i in range(n)).encode()
            body = gzip.compress(text, mtime=0)
            (folder / f"{split}.{lang}.gz").write_bytes(body)
            sums[f"{pair}/{split}.{lang}.gz"] = ("0" * 64, hashlib.sha256(text).hexdigest())
    return sums


def test_libreoffice_absent_says_where_to_put_it(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(DataError) as e:
        data_command.run_prepare(
            parse(
                ["libreoffice", "--src", "zh", "--tgt", "en", "--out", str(out), "--data-dir", str(tmp_path)]
            )
        )
    msg = str(e.value)
    assert "no download URL" in msg and str(tmp_path / "libreoffice_help" / "en-zh") in msg
    assert "{train,valid,test}.{en,zh}.gz" in msg and "extract.py" in msg and not out.exists()
    with pytest.raises(DataError, match="en-zh and en-de"):
        dl.locate_libreoffice(tmp_path, ("en", "fr"))


def test_libreoffice_checksums(tmp_path):
    sums = fake_libreoffice(tmp_path)
    splits, verified = dl.locate_libreoffice(tmp_path, ("zh", "en"), checksums=sums)
    assert splits["train"][0].name == "train.zh.gz" and len(verified) == 6
    assert verified["en-zh/test.zh.gz"] == sums["en-zh/test.zh.gz"][1]
    # the pinned digests of the real corpus reject these files, naming the file
    with pytest.raises(DataError, match=r"checksum mismatch for .*en-zh/train\.en\.gz"):
        dl.locate_libreoffice(tmp_path, ("en", "zh"))


def test_libreoffice_real_en_zh(shared_data_dir, tmp_path):
    folder = shared_data_dir / "libreoffice_help" / "en-zh"
    if not (folder / "train.zh.gz").is_file():
        pytest.skip(f"LibreOffice help en-zh not found in {folder}")
    out = tmp_path / "out"
    data_command.run_prepare(
        parse(
            [
                "libreoffice",
                "--src",
                "zh",
                "--tgt",
                "en",
                "--out",
                str(out),
                "--data-dir",
                str(shared_data_dir),
                "--threads",
                "1",
            ]
        )
    )
    meta = load_meta(out)
    assert {k: v["pairs"] for k, v in meta["splits"].items()} == {"train": 20228, "valid": 2066, "test": 2015}
    assert meta["recipe"]["shuffle_train"] and meta["spm"]["character_coverage"] == 0.9995
    assert meta["downloads"]["en-zh/train.zh.gz"] == dl.LIBREOFFICE_SHA256["en-zh/train.zh.gz"][1]
    valid_zh = list(read_lines(folder / "valid.zh.gz"))
    assert (out / "valid.zh.txt").read_text(encoding="utf-8").splitlines() == valid_zh
    # train is shuffled: the first 20 pairs are not the first 20 lines of the (page-ordered) file
    sp = load_spm(out)
    ds = ParallelDataset.load(out, "train")
    first = [sp.decode(ds[i][1].tolist()) for i in range(20)]
    original = list(read_lines(folder / "train.en.gz"))
    assert first != original[:20]
    # pairs stay aligned (a rare character outside the 0.9995 coverage may decode as unknown)
    pairs = set(zip(read_lines(folder / "train.zh.gz"), original))
    assert np.mean([(sp.decode(ds[i][0].tolist()), en) in pairs for i, en in enumerate(first)]) >= 0.9
