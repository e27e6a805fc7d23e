"""Corpora and `nmt prepare files` runs for the data tests (tests/test_prepare.py, test_lines.py,
test_dataset.py, test_bpe.py): synthetic aligned pairs, files written plain or gzipped."""

import argparse
import gzip
from pathlib import Path

import numpy as np

from nmt.data import command as data_command

WORDS_EN = "a man dog runs the street in red blue small big child plays ball with on".split()
WORDS_DE = "ein mann hund läuft die straße in rot blau klein groß kind spielt ball mit auf".split()


def write(path: Path, lines, *, gz: bool = False, raw: bytes | None = None) -> Path:
    """Write lines (or raw bytes) to path; gzip with mtime 0, so the same lines give the same bytes."""
    body = raw if raw is not None else "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(body, mtime=0) if gz else body)
    return path


def corpus(n: int, seed: int = 0):
    """n synthetic aligned pairs with 3..12 words."""
    rng = np.random.default_rng(seed)
    src, tgt = [], []
    for _ in range(n):
        k = rng.integers(3, 13)
        idx = rng.integers(0, len(WORDS_EN), size=k)
        src.append(" ".join(WORDS_EN[i] for i in idx))
        tgt.append(" ".join(WORDS_DE[i] for i in idx))
    return src, tgt


def parse(argv):
    parser = argparse.ArgumentParser()
    data_command.add_prepare_args(parser)
    return parser.parse_args(argv)


def prepare_train_files(tmp_path, src, tgt):
    """`nmt prepare files --src en --tgt de --out TMP/out --train SRC TGT` (its exit status)."""
    argv = [
        "files",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(tmp_path / "out"),
        "--train",
        str(src),
        str(tgt),
    ]
    return data_command.run_prepare(parse(argv))


def prepare_files(tmp_path, train, valid=None, test=None, *, out="out", extra=()):
    """Write the given (src_lines, tgt_lines) splits and run `prepare files`; return out dir."""
    argv = [
        "files",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(tmp_path / out),
        "--vocab-size",
        "120",
        "--threads",
        "1",
        *extra,
    ]
    for name, pair in (("train", train), ("valid", valid), ("test", test)):
        if pair is not None:
            s = write(tmp_path / f"{name}.en", pair[0])
            t = write(tmp_path / f"{name}.de", pair[1], gz=True)
            argv += [f"--{name}", str(s), str(t)]
    assert data_command.run_prepare(parse(argv)) == 0
    return tmp_path / out


def leftovers(folder: Path):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.name == "out")
