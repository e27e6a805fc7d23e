"""Fetching the raw corpora: local copies first, downloads with checksums second.

Local layout (the folder given by `--data-dir` or `$NMT_DATA_DIR`; downloads land there too):

    <root>/multi30k/{train,valid,test}.{en,de,fr,cs}.gz
    <root>/wmt14_en_de/{train,valid,test}.{en,de}[.gz]      (train: the ~4.5M pairs you bring)

Downloads are written to `<dest>.part` in the destination folder, verified, then renamed, so an
interrupted or corrupt download never leaves a file under the final name.
The base URL of every dataset can be replaced (`--base-url` or `$NMT_BASE_URL`), e.g. by a mirror
or, in the tests, by an HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import os
import re
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm


class DataError(Exception):
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
    "train.en.gz": ("e1d89f49b9f003db6bb35c24382eb56531fec4e3840cb704cf36f0c0e192b62d",
                    "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6"),
    "train.de.gz": ("d71259ddb13479e1c9cac315c123493b7e97d2c996465b76d885a80a9e8daccd",
                    "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72"),
    "train.fr.gz": ("41e4a42abcf242f69c88814fe0f8df106d877f0b07482c841f6063e3ed739039",
                    "5925a3c18f1587b6b54b87743106e6e8ab93618edb6f65d19eac0621f853a10d"),
    "train.cs.gz": ("9d69bea4cc5d23dbedd52df09e9a3674c9f45aa813f6d3a60b2da45df2947579",
                    "2be68b38c8d586ff4f54eb13cc6e1baaaa053695b3f070d3038303a47f2268da"),
    "valid.en.gz": ("0a9a01b4fd231cafeebea18983300016112dc919d3b26c5c74f6d6f388936aeb",
                    "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227"),
    "valid.de.gz": ("c7c5fd8dde71846406de776f1c342f0c1e95e1c375e3bea7d52a77faec72e965",
                    "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660"),
    "valid.fr.gz": ("9ccb4038b407530093f76c4aa5e955842303e96b0bdef3c626a0c8320d450f36",
                    "5304e444d842e962b2dda4d816b70b22a1765b15401642b7ca37a67477e708dc"),
    "valid.cs.gz": ("338965d181644162b6ffd26d9d482380ffb612f6fd201507f3c48b794fe36c78",
                    "d53827e469b0a1ca8d57e9e26b2b64c4bc4b33f5479c7b03ae87ae5c882c3e33"),
    "test.en.gz": ("4f32cb8118b90cd5189d141e34791f70c245315e17065ecf9b2af6ab57e747cf",
                   "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182"),
    "test.de.gz": ("d9747e9ef1c1bf36bf4a0e43c0d0fba58cc55d6b2b8e388cc863cba02b043fea",
                   "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16"),
    "test.fr.gz": ("aaa466eae473f1807a1b4a1683e18b6bba1234aee4ebf70e04bbc11d1e87d2be",
                   "cb3160d69b002bb638e66cc7612fcd56cb0af82eadc9c142dedc438afb885ef6"),
    "test.cs.gz": ("864684e3d375fef96350f2a7542276c9f3110da79aa8d1972c457861991261cb",
                   "45adb85f688de8407fddcbe1b36dca15d12aab868149b337e2576f2d6d2ff8d8"),
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
WMT14_TEST = ("wmt14/test-full.tgz", {"en": "test-full/newstest2014-deen-src.en.sgm",
                                      "de": "test-full/newstest2014-deen-ref.de.sgm"})
# statmt publishes no checksums; None means "not pinned": the digest of what was fetched is
# printed and recorded in meta.json (trust on first use). Pin them here once known.
WMT14_SHA256: dict[str, str | None] = {
    "wmt13/training-parallel-europarl-v7.tgz": None,
    "wmt13/training-parallel-commoncrawl.tgz": None,
    "wmt14/training-parallel-nc-v9.tgz": None,
    "wmt14/dev.tgz": None,
    "wmt14/test-full.tgz": None,
}


def sha256_file(path: str | Path, *, gunzip: bool = False) -> str:
    """Hex sha256 of a file's bytes (or of its decompressed content with `gunzip=True`)."""
    h = hashlib.sha256()
    with (gzip.open(path, "rb") if gunzip else open(path, "rb")) as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def download(url: str, dest: str | Path, *, sha256: str | None = None,
             content_sha256: str | None = None, timeout: float = 60.0) -> str:
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
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, leave=False) as bar:
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
        digest = h.hexdigest()
        expected = [d for d in (sha256, content_sha256) if d]
        if expected and digest != sha256 and not (
                content_sha256 and _gunzip_digest(part) == content_sha256):
            raise DataError(f"checksum mismatch for {url}: got sha256 {digest}, "
                            f"expected {' or (decompressed) '.join(expected)}; file removed")
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
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise DataError(f"could not download {url} ({reason}). Without network access, put the "
                        f"files in {where} (or point --data-dir / $NMT_DATA_DIR at a folder "
                        f"that has them)") from e


def fetch_multi30k(root: str | Path, langs: tuple[str, str], *, base_url: str | None = None,
                   checksums: dict = MULTI30K_SHA256) -> tuple[dict, dict]:
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
                where = (f"{folder}/ as {{train,valid,test}}.{{{','.join(langs)}}}.gz (upstream "
                         f"github.com/multi30k/dataset@{MULTI30K_COMMIT[:12]} data/task1/raw, "
                         f"splits train, val, test_2016_flickr)")
                downloaded[path.name] = _fetch(f"{base}/data/task1/raw/{upstream}.{lang}.gz", path,
                                               where=where, sha256=gz_sha,
                                               content_sha256=text_sha)
            paths.append(path)
        splits[split] = tuple(paths)
    return splits, downloaded


def fetch_wmt14(root: str | Path, langs: tuple[str, str], *, base_url: str | None = None,
                checksums: dict = WMT14_SHA256,
                splits: tuple[str, ...] = ("train", "valid", "test")) -> tuple[dict, dict]:
    """Locate (or download and extract into `root/wmt14_en_de/`) the given splits of WMT14 en-de.

    Archives go to `root/wmt14_en_de/downloads/`; the extracted splits are written as plain text
    `train.{en,de}` (the three corpora concatenated), `valid.*` (newstest2013) and `test.*`
    (newstest2014 full, <seg> text unescaped, stripped, whitespace collapsed as sacreBLEU does).
    Returns ({split: (src_path, tgt_path)}, {archive: sha256 of the download}).
    """
    if sorted(langs) != ["de", "en"]:
        raise DataError(f"wmt14 is English-German: use --src en --tgt de (or the reverse), "
                        f"not {langs[0]}-{langs[1]}")
    folder = Path(root) / "wmt14_en_de"
    base = _base_url(base_url, WMT14_BASE_URL)
    where = (f"{folder}/ as train.{{en,de}}[.gz] (Europarl v7 + CommonCrawl + News Commentary v9), "
             f"valid.* (newstest2013) and test.* (newstest2014)")
    downloaded: dict[str, str] = {}

    def archive(rel: str) -> Path:
        path = folder / "downloads" / Path(rel).name
        if not path.is_file():
            downloaded[rel] = _fetch(f"{base}/{rel}", path, where=where,
                                     sha256=checksums.get(rel))
        return path

    for split in splits:
        if all(_local(folder, f"{split}.{lang}") for lang in langs):
            continue
        members = {"train": WMT14_TRAIN, "valid": (WMT14_VALID,)}.get(split, (WMT14_TEST,))
        sources = []
        for rel, member in members:
            names = {lang: member[lang] if isinstance(member, dict) else member.format(lang=lang)
                     for lang in ("en", "de")}
            sources.append((archive(rel), names))
        _extract_split(sources, folder, split, sgm=split == "test")
    return {s: tuple(_local(folder, f"{s}.{lang}") for lang in langs) for s in splits}, downloaded


def _extract_split(sources: list, folder: Path, split: str, *, sgm: bool) -> None:
    """Concatenate tar members into `folder/{split}.{en,de}` (via .part files, renamed at the end).

    Archives are read as streams (mode "r|gz", one pass each): the wanted members are copied
    to the .part files in whichever order they come, and the two sides' line counts compared.
    """
    parts = {lang: folder / f"{split}.{lang}.part" for lang in ("en", "de")}
    try:
        outs = {lang: open(p, "wb") for lang, p in parts.items()}
        with outs["en"], outs["de"]:
            for path, names in sources:
                counts = {}
                wanted = {name: lang for lang, name in names.items()}
                with tarfile.open(path, "r|gz") as tar:
                    for info in tar:
                        lang = wanted.get(info.name)
                        if lang is None:
                            continue
                        src = tar.extractfile(info)
                        counts[lang] = (_copy_sgm if sgm else _copy_text)(src, outs[lang])
                for lang, name in names.items():
                    if lang not in counts:
                        raise DataError(f"{path}: member {name} not found")
                if counts["en"] != counts["de"]:
                    raise DataError(f"{path}: line count mismatch: {names['en']} has "
                                    f"{counts['en']} lines but {names['de']} has {counts['de']}")
        for lang, part in parts.items():
            os.replace(part, folder / f"{split}.{lang}")
    finally:
        for part in parts.values():
            part.unlink(missing_ok=True)


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
