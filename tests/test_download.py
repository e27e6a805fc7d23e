"""Download paths, against an HTTP server on 127.0.0.1 serving small fixture files."""

import argparse
import functools
import gzip
import hashlib
import io
import socket
import tarfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nmt.data import command as data_command
from nmt.data import download as dl
from nmt.data.bpe import default_vocab_size
from nmt.data.dataset import load_meta
from nmt.data.download import DataError
from nmt.data.lines import read_lines


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """(root folder served, base URL)."""
    root = tmp_path / "www"
    root.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def closed_port_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def parse(argv):
    parser = argparse.ArgumentParser()
    data_command.add_prepare_args(parser)
    return parser.parse_args(argv)


def lines(lang, n, tag):
    words = {
        "en": "the small dog runs in the park",
        "de": "der kleine hund läuft im park",
        "fr": "le petit chien court dans le parc",
    }
    return "".join(f"{words[lang]} {tag} {i}\n" for i in range(n)).encode()


# ------------------------------------------------------------------------------- download()
def test_download_verifies_checksum(server, tmp_path):
    root, url = server
    body = b"hello\n" * 1000
    (root / "f.txt").write_bytes(body)
    dest = tmp_path / "got" / "f.txt"
    assert dl.download(f"{url}/f.txt", dest, sha256=sha(body)) == sha(body)
    assert dest.read_bytes() == body


def test_checksum_mismatch_is_error_and_leaves_no_file(server, tmp_path):
    root, url = server
    (root / "f.txt").write_bytes(b"tampered\n")
    dest = tmp_path / "got" / "f.txt"
    with pytest.raises(DataError, match="checksum mismatch"):
        dl.download(f"{url}/f.txt", dest, sha256="0" * 64)
    assert list(dest.parent.iterdir()) == []  # neither f.txt nor f.txt.part


def test_a_download_cut_short_is_an_error_and_leaves_no_file(tmp_path):
    """A connection closed before Content-Length bytes came was taken for the whole file (urllib's
    read(n) returns b"" then, silently): a truncated unpinned WMT archive was kept for good."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve_short():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 10)

    thread = threading.Thread(target=serve_short, daemon=True)
    thread.start()
    dest = tmp_path / "got" / "dev.tgz"
    try:
        with pytest.raises(DataError, match=r"could not download .*dev\.tgz.*10 of 100000 bytes"):
            dl._fetch(f"http://127.0.0.1:{listener.getsockname()[1]}/dev.tgz", dest, where="here")
    finally:
        thread.join(5)
        listener.close()
    assert list(dest.parent.iterdir()) == []  # neither dev.tgz nor dev.tgz.part


def test_decompressed_checksum_accepted(server, tmp_path):
    """Same text in another gzip container (the Multi30k case) passes via content_sha256."""
    root, url = server
    text = b"a caption\n"
    (root / "f.gz").write_bytes(gzip.compress(text, mtime=123))
    dest = tmp_path / "f.gz"
    dl.download(f"{url}/f.gz", dest, sha256="1" * 64, content_sha256=sha(text))
    assert gzip.decompress(dest.read_bytes()) == text


def test_http_error_and_offline_messages(server, tmp_path):
    _, url = server
    with pytest.raises(DataError, match="could not download .*/nothing/.*train.en.gz"):
        dl.fetch_multi30k(tmp_path, ("en", "de"), base_url=url + "/nothing")
    with pytest.raises(DataError) as e:
        dl.fetch_multi30k(tmp_path / "d", ("en", "de"), base_url=closed_port_url())
    msg = str(e.value)
    assert (
        "Without network access, put the files in" in msg
        and str(tmp_path / "d" / "multi30k") in msg
        and "train,valid,test" in msg
        and "--data-dir" in msg
    )
    assert not any((tmp_path / "d" / "multi30k").iterdir())


# ------------------------------------------------------------------------------- multi30k
def serve_multi30k(root: Path, n=60):
    raw = root / "data" / "task1" / "raw"
    raw.mkdir(parents=True)
    sums = {}
    for split, upstream in dl.MULTI30K_UPSTREAM_SPLIT.items():
        for lang in ("en", "de"):
            body = gzip.compress(lines(lang, n, split))
            (raw / f"{upstream}.{lang}.gz").write_bytes(body)
            sums[f"{split}.{lang}.gz"] = (sha(body), None)
    return sums


def test_multi30k_download_then_prepare(server, tmp_path):
    root, url = server
    sums = serve_multi30k(root)
    splits, got = dl.fetch_multi30k(tmp_path / "cache", ("en", "de"), base_url=url, checksums=sums)
    assert sorted(got) == sorted(sums) and splits["valid"][1].name == "valid.de.gz"
    assert list(read_lines(splits["test"][0]))[0] == "the small dog runs in the park test 0"
    # now local: run_prepare finds the files and downloads nothing
    out = tmp_path / "out"
    data_command.run_prepare(
        parse(
            [
                "multi30k",
                "--src",
                "en",
                "--tgt",
                "de",
                "--out",
                str(out),
                "--data-dir",
                str(tmp_path / "cache"),
                "--vocab-size",
                "60",
                "--base-url",
                closed_port_url(),
                "--threads",
                "1",
            ]
        )
    )
    meta = load_meta(out)
    assert meta["downloads"] == {} and meta["splits"]["valid"]["pairs"] == 60


def test_multi30k_embedded_checksums_reject_fixture(server, tmp_path):
    """Through the CLI: fixture bytes do not match the pinned Multi30k digests."""
    root, url = server
    serve_multi30k(root)
    out = tmp_path / "out"
    with pytest.raises(DataError, match="checksum mismatch .*train.en.gz"):
        data_command.run_prepare(
            parse(
                [
                    "multi30k",
                    "--src",
                    "en",
                    "--tgt",
                    "de",
                    "--out",
                    str(out),
                    "--data-dir",
                    str(tmp_path / "cache"),
                    "--base-url",
                    url,
                ]
            )
        )
    assert not out.exists() and list((tmp_path / "cache" / "multi30k").iterdir()) == []


# ------------------------------------------------------------------------------- wmt14
def tgz(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))


def sgm(body: bytes) -> bytes:
    segs = "".join(
        f'<seg id="{i}"> {line}  &amp; co </seg>\n' for i, line in enumerate(body.decode().splitlines(), 1)
    )
    return f'<srcset>\n<doc docid="x">\n{segs}</doc>\n</srcset>\n'.encode()


def serve_wmt14(root: Path):
    for n, (rel, member) in enumerate(dl.WMT14_TRAIN):
        tgz(
            root / rel,
            {member.format(lang=lang): lines(lang, 40 + n, rel) for lang in ("en", "de")} | {"README": b"x"},
        )
    rel, member = dl.WMT14_VALID
    tgz(root / rel, {member.format(lang=lang): lines(lang, 30, "dev") for lang in ("en", "de")})
    rel, members = dl.WMT14_TEST
    tgz(root / rel, {members[lang]: sgm(lines(lang, 20, "test")) for lang in ("en", "de")})


def test_wmt14_download_extract_prepare(server, tmp_path):
    root, url = server
    serve_wmt14(root)
    out = tmp_path / "out"
    data_command.run_prepare(
        parse(
            [
                "wmt14",
                "--src",
                "en",
                "--tgt",
                "de",
                "--out",
                str(out),
                "--data-dir",
                str(tmp_path / "cache"),
                "--base-url",
                url,
                "--vocab-size",
                "80",
                "--threads",
                "1",
            ]
        )
    )
    meta = load_meta(out)
    assert {k: v["pairs"] for k, v in meta["splits"].items()} == {
        "train": 40 + 41 + 42,
        "valid": 30,
        "test": 20,
    }
    assert sorted(meta["downloads"]) == sorted(dl.WMT14_SHA256)
    assert meta["vocab_size"] <= 80
    test_en = (out / "test.en.txt").read_text().splitlines()
    assert test_en[0] == "the small dog runs in the park test 0 & co"  # unescaped, collapsed
    folder = tmp_path / "cache" / "wmt14_en_de"
    assert sorted(p.name for p in folder.iterdir()) == [
        "downloads",
        "test.de",
        "test.en",
        "train.de",
        "train.en",
        "valid.de",
        "valid.en",
    ]


def test_wmt14_checksum_mismatch(server, tmp_path):
    root, url = server
    serve_wmt14(root)
    sums = dict(dl.WMT14_SHA256)
    sums["wmt14/dev.tgz"] = "f" * 64
    with pytest.raises(DataError, match="checksum mismatch for .*dev.tgz"):
        dl.fetch_wmt14(tmp_path, ("en", "de"), base_url=url, checksums=sums)
    downloads = tmp_path / "wmt14_en_de" / "downloads"
    assert "dev.tgz" not in {p.name for p in downloads.iterdir()}
    assert not any(p.name.endswith(".part") for p in downloads.parent.rglob("*"))


def test_a_truncated_archive_is_an_error_naming_it(server, tmp_path):
    """An archive cut short (a download without Content-Length that stopped early is kept: statmt
    publishes no checksum) was an internal error (tarfile.ReadError) that named no file."""
    root, url = server
    serve_wmt14(root)
    downloads = tmp_path / "wmt14_en_de" / "downloads"
    tgz(
        downloads / "dev.tgz", {f"dev/newstest2013.{lang}": lines(lang, 3000, "dev") for lang in ("en", "de")}
    )
    whole = (downloads / "dev.tgz").read_bytes()
    for cut in (whole[: len(whole) // 2], whole[:100]):
        (downloads / "dev.tgz").write_bytes(cut)
        with pytest.raises(DataError, match=r"dev\.tgz: damaged or truncated archive .*delete it"):
            dl.fetch_wmt14(tmp_path, ("en", "de"), base_url=url, splits=("valid",))
        assert sorted(p.name for p in downloads.parent.iterdir()) == ["downloads"]  # no .part, no valid.*


def test_wmt14_languages():
    with pytest.raises(DataError, match="English-German or English-French"):
        dl.fetch_wmt14("/nonexistent", ("en", "cs"))


def test_wmt14_en_fr_download_extract_prepare(server, tmp_path):
    """The paper's Table 2 en-fr task: five corpora, Gigaword a plain .tar of .gz members."""
    root, url = server
    task = dl.WMT14_EN_FR
    for n, (rel, member) in enumerate(task.train):
        body = {lang: lines(lang, 10 + n, rel) for lang in ("en", "fr")}
        if member.endswith(".gz"):
            body = {lang: gzip.compress(b) for lang, b in body.items()}
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w" if rel.endswith(".tar") else "w:gz") as tar:
            for lang, b in body.items():
                info = tarfile.TarInfo(member.format(lang=lang))
                info.size = len(b)
                tar.addfile(info, io.BytesIO(b))
    rel, member = task.valid
    tgz(root / rel, {member.format(lang=lang): lines(lang, 30, "dev") for lang in ("en", "fr")})
    rel, members = task.test
    tgz(root / rel, {members[lang]: sgm(lines(lang, 20, "test")) for lang in ("en", "fr")})
    out = tmp_path / "out"
    data_command.run_prepare(
        parse(
            [
                "wmt14",
                "--src",
                "fr",
                "--tgt",
                "en",
                "--out",
                str(out),
                "--data-dir",
                str(tmp_path / "cache"),
                "--base-url",
                url,
                "--vocab-size",
                "80",
                "--threads",
                "1",
            ]
        )
    )
    meta = load_meta(out)
    assert {k: v["pairs"] for k, v in meta["splits"].items()} == {
        "train": 10 + 11 + 12 + 13 + 14,
        "valid": 30,
        "test": 20,
    }
    assert sorted(meta["downloads"]) == sorted(task.sha256)
    assert (
        meta["src_lang"] == "fr"
        and (out / "test.en.txt").read_text().splitlines()[0] == "the small dog runs in the park test 0 & co"
    )
    train_en = (tmp_path / "cache" / "wmt14_en_fr" / "train.en").read_text().splitlines()
    assert train_en[-1] == "the small dog runs in the park wmt10/training-giga-fren.tar 13"


def test_wmt14_en_fr_default_vocabulary_is_32k(tmp_path, monkeypatch):
    """Without --vocab-size, en-fr asks for the paper's 32k word pieces (37k stays en-de's)."""
    seen = {}
    monkeypatch.setattr(dl, "fetch_wmt14", lambda root, langs, **kw: ({}, {}))
    monkeypatch.setattr(
        data_command,
        "prepare",
        lambda splits, out, *, options, **kw: seen.setdefault("options", options) and {},
    )
    monkeypatch.setattr(data_command, "format_report", lambda meta: "")
    for tgt, vocab in (("fr", 32000), ("de", None)):
        seen.clear()
        data_command.run_prepare(parse(["wmt14", "--src", "en", "--tgt", tgt, "--out", str(tmp_path)]))
        assert seen["options"].vocab_size == vocab
    assert default_vocab_size("wmt14", 4_500_000) == 37000


def test_wmt17_zh_en_download_extract_prepare(server, tmp_path):
    root, url = server
    task = dl.WMT17_ZH_EN
    zh = {"zh": "小狗在公园里跑。", "en": "the small dog runs in the park"}
    for n, (rel, member) in enumerate(task.train):
        tgz(
            root / rel,
            {
                member.format(lang=lang): "".join(f"{zh[lang]} {i}\n" for i in range(25 + n)).encode()
                for lang in ("zh", "en")
            },
        )
    for split, (rel, members) in (("valid", task.valid), ("test", task.test)):
        tgz(
            root / rel,
            {
                members[lang]: sgm("".join(f"{zh[lang]} {split} {i}\n" for i in range(15)).encode())
                for lang in ("zh", "en")
            },
        )
    out = tmp_path / "out"
    data_command.run_prepare(
        parse(
            [
                "wmt17-zh-en",
                "--src",
                "en",
                "--tgt",
                "zh",
                "--out",
                str(out),
                "--data-dir",
                str(tmp_path / "cache"),
                "--base-url",
                url,
                "--vocab-size",
                "60",
                "--threads",
                "1",
            ]
        )
    )
    meta = load_meta(out)
    assert {k: v["pairs"] for k, v in meta["splits"].items()} == {"train": 25 + 26, "valid": 15, "test": 15}
    assert sorted(meta["downloads"]) == sorted(task.sha256)
    assert meta["spm"]["character_coverage"] == 0.9995
    assert (out / "valid.zh.txt").read_text().splitlines()[0] == "小狗在公园里跑。 valid 0 & co"
    with pytest.raises(DataError, match="wmt17_zh_en is zh-en, not en-de"):
        dl.fetch_wmt(tmp_path, task, ("en", "de"))
