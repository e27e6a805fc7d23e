"""Fetching the raw corpora: local copies first, downloads with checksums second.

Local layout (the folder given by `--data-dir` or `$NMT_DATA_DIR`; downloads land there too):

    <root>/multi30k/{train,valid,test}.{en,de,fr,cs}.gz
    <root>/wmt14_en_de/{train,valid,test}.{en,de}[.gz]      (train: the ~4.5M pairs you bring)
    <root>/wmt14_en_fr/{train,valid,test}.{en,fr}[.gz]      (train: the ~36M pairs you bring)
    <root>/wmt17_zh_en/{train,valid,test}.{zh,en}[.gz]
    <root>/libreoffice_help/{en-zh,en-de}/{train,valid,test}.*.gz   (local only, checksummed)

Downloads are written to `<dest>.part` in the destination folder, verified, then renamed, so an
interrupted or corrupt download never leaves a file under the final name.
The base URL of every dataset can be replaced (`--base-url` or `$NMT_BASE_URL`), e.g. by a mirror
or, in the tests, by an HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import http.client
import os
import re
import tarfile
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..atomic import sha256_file
from ..errors import UserError
from ..progress import progress


class DataError(UserError):
    """A user-facing data problem; the CLI prints `error: <message>` and exits with status 2."""


# ---------------------------------------------------------------------------------------------
# Multi30k (Elliott et al. 2016): github multi30k/dataset, data/task1/raw/<upstream split>.<lang>.gz
MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
MULTI30K_BASE_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}"
MULTI30K_LANGS = ("en", "de", "fr", "cs")
MULTI30K_UPSTREAM_SPLIT = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
# Per local file name: (sha256 of the .gz as kept in shared/data/multi30k/SOURCE.md,
#                       sha256 of the decompressed text).
# The text is byte-identical upstream but a .gz container may differ (gzip header, level), so a
# download is accepted if either digest matches.
MULTI30K_SHA256 = {
    "train.en.gz": (
        "e1d89f49b9f003db6bb35c24382eb56531fec4e3840cb704cf36f0c0e192b62d",
        "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
    ),
    "train.de.gz": (
        "d71259ddb13479e1c9cac315c123493b7e97d2c996465b76d885a80a9e8daccd",
        "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72",
    ),
    "train.fr.gz": (
        "41e4a42abcf242f69c88814fe0f8df106d877f0b07482c841f6063e3ed739039",
        "5925a3c18f1587b6b54b87743106e6e8ab93618edb6f65d19eac0621f853a10d",
    ),
    "train.cs.gz": (
        "9d69bea4cc5d23dbedd52df09e9a3674c9f45aa813f6d3a60b2da45df2947579",
        "2be68b38c8d586ff4f54eb13cc6e1baaaa053695b3f070d3038303a47f2268da",
    ),
    "valid.en.gz": (
        "0a9a01b4fd231cafeebea18983300016112dc919d3b26c5c74f6d6f388936aeb",
        "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
    ),
    "valid.de.gz": (
        "c7c5fd8dde71846406de776f1c342f0c1e95e1c375e3bea7d52a77faec72e965",
        "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660",
    ),
    "valid.fr.gz": (
        "9ccb4038b407530093f76c4aa5e955842303e96b0bdef3c626a0c8320d450f36",
        "5304e444d842e962b2dda4d816b70b22a1765b15401642b7ca37a67477e708dc",
    ),
    "valid.cs.gz": (
        "338965d181644162b6ffd26d9d482380ffb612f6fd201507f3c48b794fe36c78",
        "d53827e469b0a1ca8d57e9e26b2b64c4bc4b33f5479c7b03ae87ae5c882c3e33",
    ),
    "test.en.gz": (
        "4f32cb8118b90cd5189d141e34791f70c245315e17065ecf9b2af6ab57e747cf",
        "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
    ),
    "test.de.gz": (
        "d9747e9ef1c1bf36bf4a0e43c0d0fba58cc55d6b2b8e388cc863cba02b043fea",
        "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16",
    ),
    "test.fr.gz": (
        "aaa466eae473f1807a1b4a1683e18b6bba1234aee4ebf70e04bbc11d1e87d2be",
        "cb3160d69b002bb638e66cc7612fcd56cb0af82eadc9c142dedc438afb885ef6",
    ),
    "test.cs.gz": (
        "864684e3d375fef96350f2a7542276c9f3110da79aa8d1972c457861991261cb",
        "45adb85f688de8407fddcbe1b36dca15d12aab868149b337e2576f2d6d2ff8d8",
    ),
}

# ---------------------------------------------------------------------------------------------
# WMT14 English-German as in the paper (and fairseq's prepare-wmt14en2de.sh): Europarl v7 +
# CommonCrawl + News Commentary v9 for training, newstest2013 dev, newstest2014 (full, 3003) test.
WMT14_BASE_URL = "https://www.statmt.org"
WMT14_TRAIN = (  # (archive path under the base URL, member name with {lang})
    ("wmt13/training-parallel-europarl-v7.tgz", "training/europarl-v7.de-en.{lang}"),
    ("wmt13/training-parallel-commoncrawl.tgz", "commoncrawl.de-en.{lang}"),
    ("wmt14/training-parallel-nc-v9.tgz", "training/news-commentary-v9.de-en.{lang}"),
)
WMT14_VALID = ("wmt14/dev.tgz", "dev/newstest2013.{lang}")
WMT14_TEST = (
    "wmt14/test-full.tgz",
    {"en": "test-full/newstest2014-deen-src.en.sgm", "de": "test-full/newstest2014-deen-ref.de.sgm"},
)
# statmt publishes no checksums; None means "not pinned": the digest of what was fetched is
# printed and recorded in meta.json (trust on first use). Pin them here once known.
WMT14_SHA256: dict[str, str | None] = {
    "wmt13/training-parallel-europarl-v7.tgz": None,
    "wmt13/training-parallel-commoncrawl.tgz": None,
    "wmt14/training-parallel-nc-v9.tgz": None,
    "wmt14/dev.tgz": None,
    "wmt14/test-full.tgz": None,
}


@dataclass(frozen=True)
class WmtTask:
    """One WMT download recipe: archives and the members that make each split.

    `train`: (archive path under `base_url`, member with {lang}); `valid`, `test`: the same, or
    (archive, {lang: member}). A member ending in .gz is decompressed; .sgm is read as SGML.
    """

    name: str  # the folder under the data root
    langs: tuple[str, str]
    base_url: str
    train: tuple
    valid: tuple
    test: tuple
    sha256: dict  # archive -> sha256 or None (not pinned: trust on first use)
    train_note: str  # what train is, for the "put the files in" message


WMT14_EN_DE = WmtTask(
    "wmt14_en_de",
    ("en", "de"),
    WMT14_BASE_URL,
    WMT14_TRAIN,
    WMT14_VALID,
    WMT14_TEST,
    WMT14_SHA256,
    "Europarl v7 + CommonCrawl + News Commentary v9",
)

# WMT14 English-French as in the paper's Table 2 (36M pairs; fairseq prepare-wmt14en2fr.sh):
# Europarl v7, CommonCrawl, UN (undoc 2000), News Commentary v9, Gigaword fr-en (10^9 corpus);
# newstest2013 dev, newstest2014 (full, 3003) test. Gigaword is a plain .tar of .gz members.
WMT14_EN_FR = WmtTask(
    "wmt14_en_fr",
    ("en", "fr"),
    WMT14_BASE_URL,
    (
        ("wmt13/training-parallel-europarl-v7.tgz", "training/europarl-v7.fr-en.{lang}"),
        ("wmt13/training-parallel-commoncrawl.tgz", "commoncrawl.fr-en.{lang}"),
        ("wmt13/training-parallel-un.tgz", "un/undoc.2000.fr-en.{lang}"),
        ("wmt14/training-parallel-nc-v9.tgz", "training/news-commentary-v9.fr-en.{lang}"),
        ("wmt10/training-giga-fren.tar", "giga-fren.release2.fixed.{lang}.gz"),
    ),
    ("wmt14/dev.tgz", "dev/newstest2013.{lang}"),
    (
        "wmt14/test-full.tgz",
        {"en": "test-full/newstest2014-fren-src.en.sgm", "fr": "test-full/newstest2014-fren-ref.fr.sgm"},
    ),
    {
        "wmt13/training-parallel-europarl-v7.tgz": None,
        "wmt13/training-parallel-commoncrawl.tgz": None,
        "wmt13/training-parallel-un.tgz": None,
        "wmt14/training-parallel-nc-v9.tgz": None,
        "wmt10/training-giga-fren.tar": None,
        "wmt14/dev.tgz": None,
        "wmt14/test-full.tgz": None,
    },
    "Europarl v7 + CommonCrawl + UN + News Commentary v9 + Gigaword fr-en",
)

# WMT17 Chinese-English (news task): News Commentary v12 and the UN Parallel Corpus v1.0 (the
# latter from the TensorFlow Datasets mirror of conferences.unite.un.org/UNCorpus), newsdev2017
# dev, newstest2017 test (the zh-en and en-zh sets hold the same pairs). The task's CWMT corpora
# (casia2015, casict2011, casict2015, datum2015, datum2017, neu2017) sit behind an FTP login
# (ftp://cwmt-wmt:cwmt-wmt@nlp.nju.edu.cn/parallel/NAME.zip) and are not fetched: concatenate
# them with the rest and pass --train SRC TGT. sacreBLEU pins md5 9b1aa63c1cf49dccdd20b962fe313989
# (dev.tgz) and 86a1724c276004aa25455ae2a04cef26 (test.tgz); no sha256 is published.
WMT17_ZH_EN = WmtTask(
    "wmt17_zh_en",
    ("zh", "en"),
    "https://data.statmt.org",
    (
        ("wmt17/translation-task/training-parallel-nc-v12.tgz", "training/news-commentary-v12.zh-en.{lang}"),
        ("tfds-data/downloads/uncorpus/UNv1.0.en-zh.tar.gz", "en-zh/UNv1.0.en-zh.{lang}"),
    ),
    (
        "wmt17/translation-task/dev.tgz",
        {"zh": "dev/newsdev2017-zhen-src.zh.sgm", "en": "dev/newsdev2017-zhen-ref.en.sgm"},
    ),
    (
        "wmt17/translation-task/test.tgz",
        {"zh": "test/newstest2017-zhen-src.zh.sgm", "en": "test/newstest2017-zhen-ref.en.sgm"},
    ),
    {
        "wmt17/translation-task/training-parallel-nc-v12.tgz": None,
        "tfds-data/downloads/uncorpus/UNv1.0.en-zh.tar.gz": None,
        "wmt17/translation-task/dev.tgz": None,
        "wmt17/translation-task/test.tgz": None,
    },
    "News Commentary v12 + UN v1.0 (+ CWMT, which you bring)",
)
# Where each archive lives when no --base-url mirror is given (default: the task's base_url).
ARCHIVE_BASE = {"tfds-data/downloads/uncorpus/UNv1.0.en-zh.tar.gz": "https://storage.googleapis.com"}

# ---------------------------------------------------------------------------------------------
# LibreOffice help en-zh / en-de (see shared/data/libreoffice_help/SOURCE.md): built from Debian
# packages by its extract.py; no download URL. Per file: (sha256 of the .gz, sha256 of the text);
# either must match (a rebuild with another zlib compresses the same text to other bytes).
LIBREOFFICE_PAIRS = {frozenset(("en", "zh")): "en-zh", frozenset(("en", "de")): "en-de"}
LIBREOFFICE_SHA256 = {
    "en-zh/train.en.gz": (
        "5bf086c247768d1c30e84ae14166957d3e5c432b8c325e24022d319aeefb39e5",
        "73b81d6493b67530a6392c7a1b6ec4260df01467f8bdef67476f286f9784c0d4",
    ),
    "en-zh/train.zh.gz": (
        "7942a563d6dfcfd683e85ac198a1349614eec12431360fa4069ccd6b63516751",
        "3c8caa8388a08d5e3e911564865c4fd6459105dc4982962b3d614321e2dd9875",
    ),
    "en-zh/valid.en.gz": (
        "353e77d2f13e6b066807189a9af0bc2c48b8a0de992b05d29ccb9f8da8dccaf4",
        "df9eb64d6a5beb785ab0cdf12979375252ca99bb931c14685705d18a6cede5e6",
    ),
    "en-zh/valid.zh.gz": (
        "e629c990e619d4a16f8b4778619e271e252f36db466602d6b16a800740cc31db",
        "a4c307db36bd512b82a71b68e87d8f0d4e869372f533807ad697c9cd30e294fd",
    ),
    "en-zh/test.en.gz": (
        "d5afeb84ee6636185e01f51c6858fff2fccee67aab34c5275eb0587b5b849ebc",
        "f5329ffb635e85f8eb69a072b834c75e6aed43ab5cebf0a6811fc90686e0d621",
    ),
    "en-zh/test.zh.gz": (
        "ad9f1be101043b50a8800e8a67a2acc593cdc9184eb6fa8a80b23d7bcbbe760a",
        "853276e7a04b7878be6cdc86401a2f843edab765b9d1dad195253afddd8afe73",
    ),
    "en-de/train.en.gz": (
        "07d7eafc02e785b243bb11744cee0c7b969ee3e031c52db9ed709ebf608d0ff7",
        "ef6c11e8b0007cbd9356cefe3c76cfc6b9a52701f7350af704a79b07ff0fff71",
    ),
    "en-de/train.de.gz": (
        "f8ff47316dfdd1d39e1c864b41a502a5a21d8ade11d8bc74e59068fe5c81f0d3",
        "ecb3f810c832c680ed2d317d47fa6321f01ab56ba621032fc3e13a81fff1ed84",
    ),
    "en-de/valid.en.gz": (
        "812196b03c272a4a962b8004bd949bca6cc93ac5899d710e197723ad4a324d08",
        "b9613446a0f458e62bd313ac6d45fff9ad5ad394170140cf75517dc5f46afcad",
    ),
    "en-de/valid.de.gz": (
        "c71f9c9eb51593606c163a8556095a82d385dd6dbea2565a0a398cc37c1d9b89",
        "2304d0d9abcf00a9678311e5df7fe927122b672687bb638e0148d0d5ef4bba3a",
    ),
    "en-de/test.en.gz": (
        "e7076849793e29cf97a08f4107972cbea6475cc1bbc4a104cb4e59a35fa2e747",
        "b2c8be7a9ef5ce1a366f8aee3155436cca5fa7c291dc3fb7dda77bcb9c7d4b01",
    ),
    "en-de/test.de.gz": (
        "805d5f01b1a2b91a567d655a8d7726ebe0167b0fae07d62ad858d967eb1654d4",
        "bd68e741ec665db09f82ab9a1dadd0d9b99c1ef7ad16e9f4fb50ae875798deb6",
    ),
}


def download(
    url: str,
    dest: str | Path,
    *,
    sha256: str | None = None,
    content_sha256: str | None = None,
    timeout: float = 60.0,
) -> str:
    """Download `url` to `dest` with a progress bar; return the sha256 of the downloaded bytes.

    With `sha256` and/or `content_sha256` (digest of the gunzipped bytes) given, the file is
    accepted if either matches; otherwise DataError and nothing is left at `dest` or `dest.part`.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, open(part, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0) or None
            with progress(total=total, unit="B", desc=dest.name, leave=False) as bar:
                received = 0
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
                    received += len(chunk)
        if total is not None and received != total:  # read(n) gives b"" when the connection closes early
            raise ConnectionError(f"the connection closed after {received} of {total} bytes")
        digest = h.hexdigest()
        expected = [d for d in (sha256, content_sha256) if d]
        if expected and digest != sha256 and not (content_sha256 and _gunzip_digest(part) == content_sha256):
            raise DataError(
                f"checksum mismatch for {url}: got sha256 {digest}, "
                f"expected {' or (decompressed) '.join(expected)}; file removed"
            )
        os.replace(part, dest)
        return digest
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def _gunzip_digest(path: Path) -> str | None:
    try:
        return sha256_file(path, gunzip=True)
    except (OSError, EOFError):  # not gzip / truncated
        return None


def _base_url(base_url: str | None, default: str) -> str:
    return (base_url or os.environ.get("NMT_BASE_URL") or default).rstrip("/")


def _local(folder: Path, stem: str) -> Path | None:
    """`folder/stem.gz` or `folder/stem` if present."""
    for path in (folder / f"{stem}.gz", folder / stem):
        if path.is_file():
            return path
    return None


def _fetch(url: str, dest: Path, *, where: str, **checks) -> str:
    try:
        return download(url, dest, **checks)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:  # HTTPException: IncompleteRead
        reason = getattr(e, "reason", e)
        raise DataError(
            f"could not download {url} ({reason}). Without network access, put the "
            f"files in {where} (or point --data-dir / $NMT_DATA_DIR at a folder "
            f"that has them)"
        ) from e


def fetch_multi30k(
    root: str | Path,
    langs: tuple[str, str],
    *,
    base_url: str | None = None,
    checksums: dict = MULTI30K_SHA256,
) -> tuple[dict, dict]:
    """Locate (or download into `root/multi30k/`) the Multi30k files for two languages.

    Returns ({split: (src_path, tgt_path)}, {file name: sha256 of the download}).
    """
    for lang in langs:
        if lang not in MULTI30K_LANGS:
            raise DataError(f"multi30k has no language {lang!r}; choose from {MULTI30K_LANGS}")
    folder = Path(root) / "multi30k"
    base = _base_url(base_url, MULTI30K_BASE_URL)
    downloaded = {}
    splits = {}
    for split, upstream in MULTI30K_UPSTREAM_SPLIT.items():
        paths = []
        for lang in langs:
            path = _local(folder, f"{split}.{lang}")
            if path is None:
                path = folder / f"{split}.{lang}.gz"
                gz_sha, text_sha = checksums.get(path.name, (None, None))
                where = (
                    f"{folder}/ as {{train,valid,test}}.{{{','.join(langs)}}}.gz (upstream "
                    f"github.com/multi30k/dataset@{MULTI30K_COMMIT[:12]} data/task1/raw, "
                    f"splits train, val, test_2016_flickr)"
                )
                downloaded[path.name] = _fetch(
                    f"{base}/data/task1/raw/{upstream}.{lang}.gz",
                    path,
                    where=where,
                    sha256=gz_sha,
                    content_sha256=text_sha,
                )
            paths.append(path)
        splits[split] = tuple(paths)
    return splits, downloaded


def fetch_wmt14(
    root: str | Path,
    langs: tuple[str, str],
    *,
    base_url: str | None = None,
    checksums: dict | None = None,
    splits: tuple[str, ...] = ("train", "valid", "test"),
) -> tuple[dict, dict]:
    """WMT14 English-German (the paper's main task) or English-French (its Table 2 task)."""
    tasks = {frozenset(t.langs): t for t in (WMT14_EN_DE, WMT14_EN_FR)}
    task = tasks.get(frozenset(langs))
    if task is None:
        raise DataError(
            f"wmt14 is English-German or English-French: use --src en --tgt de|fr "
            f"(or the reverse), not {langs[0]}-{langs[1]}"
        )
    return fetch_wmt(root, task, langs, base_url=base_url, checksums=checksums, splits=splits)


def fetch_wmt(
    root: str | Path,
    task: WmtTask,
    langs: tuple[str, str],
    *,
    base_url: str | None = None,
    checksums: dict | None = None,
    splits: tuple[str, ...] = ("train", "valid", "test"),
) -> tuple[dict, dict]:
    """Locate (or download and extract into `root/<task.name>/`) the given splits of a WMT task.

    Archives go to `root/<task.name>/downloads/`; the extracted splits are written as plain text
    `train.*` (the corpora concatenated), `valid.*` and `test.*` (from SGML: <seg> text
    unescaped, stripped, whitespace collapsed as sacreBLEU does).
    Returns ({split: (src_path, tgt_path)}, {archive: sha256 of the download}).
    """
    if sorted(langs) != sorted(task.langs):
        raise DataError(f"{task.name} is {'-'.join(task.langs)}, not {langs[0]}-{langs[1]}")
    checksums = task.sha256 if checksums is None else checksums
    folder = Path(root) / task.name
    a, b = task.langs
    where = (
        f"{folder}/ as train.{{{a},{b}}}[.gz] ({task.train_note}), valid.* "
        f"({_member(task.valid, a)}) and test.* ({_member(task.test, a)})"
    )
    downloaded: dict[str, str] = {}

    def archive(rel: str) -> Path:
        path = folder / "downloads" / Path(rel).name
        if not path.is_file():
            base = _base_url(base_url, ARCHIVE_BASE.get(rel, task.base_url))
            downloaded[rel] = _fetch(f"{base}/{rel}", path, where=where, sha256=checksums.get(rel))
        return path

    for split in splits:
        if all(_local(folder, f"{split}.{lang}") for lang in langs):
            continue
        members = {"train": task.train, "valid": (task.valid,)}.get(split, (task.test,))
        sources = [
            (archive(rel), {lang: _member((rel, member), lang) for lang in task.langs})
            for rel, member in members
        ]
        _extract_split(sources, folder, split)
    return {s: tuple(_local(folder, f"{s}.{lang}") for lang in langs) for s in splits}, downloaded


def _member(entry: tuple, lang: str) -> str:
    member = entry[1]
    return member[lang] if isinstance(member, dict) else member.format(lang=lang)


def _extract_split(sources: list, folder: Path, split: str) -> None:
    """Concatenate tar members into `folder/{split}.{lang}` (via .part files, renamed at the end).

    Archives are read as streams (mode "r|*": .tgz or plain .tar, one pass each): the wanted
    members are copied to the .part files in whichever order they come (a .gz member is
    decompressed, an .sgm member reduced to its <seg> texts), and the sides' line counts compared.
    """
    langs = tuple(sources[0][1])
    parts = {lang: folder / f"{split}.{lang}.part" for lang in langs}
    try:
        outs = {lang: open(p, "wb") for lang, p in parts.items()}
        try:
            for path, names in sources:
                counts = {}
                wanted = {name: lang for lang, name in names.items()}
                try:
                    with tarfile.open(path, "r|*") as tar:
                        for info in tar:
                            lang = wanted.get(info.name)
                            if lang is None:
                                continue
                            src = tar.extractfile(info)
                            if info.name.endswith(".gz"):
                                src = gzip.GzipFile(fileobj=src)
                            copy = _copy_sgm if info.name.endswith(".sgm") else _copy_text
                            counts[lang] = copy(src, outs[lang])
                except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as e:
                    raise DataError(
                        f"{path}: damaged or truncated archive ({type(e).__name__}: {e}); delete it to "
                        "download it again"
                    ) from e
                for lang, name in names.items():
                    if lang not in counts:
                        raise DataError(f"{path}: member {name} not found")
                if len(set(counts.values())) > 1:
                    raise DataError(
                        f"{path}: line count mismatch: "
                        + " but ".join(f"{names[lang]} has {counts[lang]} lines" for lang in langs)
                    )
        finally:
            for out in outs.values():
                out.close()
        for lang, part in parts.items():
            os.replace(part, folder / f"{split}.{lang}")
    finally:
        for part in parts.values():
            part.unlink(missing_ok=True)


def locate_libreoffice(
    root: str | Path, langs: tuple[str, str], *, checksums: dict = LIBREOFFICE_SHA256
) -> tuple[dict, dict]:
    """The LibreOffice help splits for two languages, each file checked against its checksums.

    There is no public download: without the files, DataError says where to put them.
    Returns ({split: (src_path, tgt_path)}, {file: sha256 of its text}).
    """
    pair = LIBREOFFICE_PAIRS.get(frozenset(langs))
    if pair is None:
        raise DataError(f"libreoffice has en-zh and en-de (either direction), not {langs[0]}-{langs[1]}")
    folder = Path(root) / "libreoffice_help" / pair
    splits, verified = {}, {}
    for split in ("train", "valid", "test"):
        paths = []
        for lang in langs:
            path = folder / f"{split}.{lang}.gz"
            if not path.is_file():
                raise DataError(
                    f"{path} not found. The LibreOffice help corpus has no download URL: build "
                    f"it with extract.py from the Debian libreoffice-help-en-us/-zh-cn/-de "
                    f"packages and put {{train,valid,test}}.{{{','.join(pair.split('-'))}}}.gz "
                    f"in {folder}/ (or point --data-dir / $NMT_DATA_DIR at the folder holding "
                    f"libreoffice_help/)"
                )
            rel = f"{pair}/{path.name}"
            gz_sha, text_sha = checksums.get(rel, (None, None))
            text_digest = _gunzip_digest(path)
            if text_digest != text_sha and sha256_file(path) != gz_sha:
                raise DataError(
                    f"checksum mismatch for {path}: its text has sha256 "
                    f"{text_digest}, expected {text_sha} (see SOURCE.md)"
                )
            verified[rel] = text_digest
            paths.append(path)
        splits[split] = tuple(paths)
    return splits, verified


def _copy_text(src, out) -> int:
    """Copy lines, making sure each ends with a newline; return the line count."""
    n = 0
    for line in src:
        out.write(line if line.endswith(b"\n") else line + b"\n")
        n += 1
    return n


_SEG = re.compile(rb"<seg[^>]*>(.*)</seg>")


def _copy_sgm(src, out) -> int:
    """Write the text of each <seg> of an SGML test set, one per line; return the count."""
    n = 0
    for line in src:
        m = _SEG.search(line)
        if m:
            text = " ".join(html.unescape(m.group(1).decode("utf-8")).split())
            out.write(text.encode("utf-8") + b"\n")
            n += 1
    return n
