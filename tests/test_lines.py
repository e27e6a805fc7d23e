"""nmt.data.lines: reading text files (plain, gzip, BOM, CRLF; errors naming the file and line),
aligned pairs, and the cleaning of every sentence with its counts."""

import gzip
import json
import unicodedata

import pytest
from data_fixtures import corpus, leftovers, prepare_files, prepare_train_files, write

from nmt.data.dataset import ParallelDataset
from nmt.data.download import DataError
from nmt.data.lines import clean_line, read_lines
from nmt.vocab import load_spm


def test_read_lines_plain_gz_bom_crlf(tmp_path):
    raw = "\ufeffone\r\ntwo \n\nthree".encode("utf-8")
    for gz in (False, True):
        path = write(tmp_path / f"f{gz}", None, raw=raw, gz=gz)
        assert list(read_lines(path)) == ["one", "two ", "", "three"]


def test_invalid_utf8_names_file_and_line(tmp_path):
    bad = write(tmp_path / "bad.de", None, raw=b"gut\nauch gut\nschlecht \xff\xfe\n")
    with pytest.raises(DataError, match=r"bad\.de: line 3: invalid UTF-8"):
        list(read_lines(bad))
    src = write(tmp_path / "ok.en", ["good", "also good", "bad"])
    with pytest.raises(DataError, match=r"bad\.de: line 3: invalid UTF-8"):
        prepare_train_files(tmp_path, src, bad)
    assert leftovers(tmp_path) == []  # nothing half-written


def test_corrupt_gzip_is_an_error_naming_the_file_and_the_line(tmp_path):
    """A damaged deflate stream (zlib.error, not an OSError) was an internal error."""
    text = "".join(f"line {i} {i * i} {i % 7}\n" for i in range(5000)).encode()
    body = bytearray(gzip.compress(text, mtime=0))
    body[200:260] = bytes(b ^ 0x5A for b in body[200:260])  # zlib: invalid distance too far back
    bad = write(tmp_path / "bad.en.gz", None, raw=bytes(body))
    with pytest.raises(DataError, match=r"bad\.en\.gz: line 1: corrupt or truncated gzip"):
        list(read_lines(bad))
    src = write(tmp_path / "ok.de", [str(i) for i in range(5000)])
    with pytest.raises(DataError, match=r"bad\.en\.gz: line 1: corrupt or truncated gzip"):
        prepare_train_files(tmp_path, bad, src)
    assert leftovers(tmp_path) == []
    cut = write(tmp_path / "cut.en.gz", None, raw=gzip.compress(text, mtime=0)[:5000])
    with pytest.raises(DataError, match=r"cut\.en\.gz: line (\d+): corrupt or truncated gzip") as e:
        list(read_lines(cut))
    assert int(str(e.value).split(": line ")[1].split(":")[0]) > 1  # where reading stopped


def test_line_count_mismatch_names_both_files_and_counts(tmp_path):
    src = write(tmp_path / "train.en", ["a", "b", "c", "d", "e"])
    tgt = write(tmp_path / "train.de", ["a", "b", "c", "d"], gz=True)
    for a, b, na, nb in ((src, tgt, 5, 4), (tgt, src, 4, 5)):
        with pytest.raises(DataError) as e:
            prepare_train_files(tmp_path, a, b)
        msg = str(e.value)
        assert f"{a} has {na} lines" in msg and f"{b} has {nb} lines" in msg, msg
    assert leftovers(tmp_path) == []


def test_nfc_and_strip(tmp_path):
    src, tgt = corpus(200)
    decomposed = "  Cafe\u0301 au lai\u0302t \t"  # NFD, padded with whitespace
    src[0], tgt[0] = decomposed, "Kaffee  mit   Milch "
    out = prepare_files(tmp_path, (src, tgt), valid=([decomposed], ["  Gru\u0308n "]))
    sp, train, _valid = load_spm(out), *(ParallelDataset.load(out, s) for s in ("train", "valid"))
    assert sp.decode(train[0][0].tolist()) == "Café au laît"
    assert sp.decode(train[0][1].tolist()) == "Kaffee  mit   Milch"  # inner spaces kept
    assert (out / "valid.en.txt").read_text(encoding="utf-8") == "Café au laît\n"
    assert (out / "valid.de.txt").read_text(encoding="utf-8") == "Grün\n"
    assert clean_line(decomposed) == unicodedata.normalize("NFC", decomposed.strip())
    report = json.loads((out / "meta.json").read_text())["cleaning"]
    assert report["train"]["stripped"] == 2 and report["train"]["nfc_changed"] == 1
    assert report["valid"]["stripped"] == 2 and report["valid"]["nfc_changed"] == 2
