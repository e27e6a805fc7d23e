"""nmt/atomic.py: the one atomic file writer, directory replacement and the one sha256 of a file."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from nmt import atomic


def test_write_text_fsyncs_and_gives_the_umask_permissions(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    old = os.umask(0o027)
    try:
        atomic.write_text(tmp_path / "out.txt", "ä line\n")
    finally:
        os.umask(old)
    path = tmp_path / "out.txt"
    assert path.read_bytes() == "ä line\n".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # as open() would make it, not mkstemp's 0600
    assert len(synced) == 2  # the file, then its folder
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "table.md"
    atomic.write_text(path, "before\n")

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        atomic.write_bytes(path, b"after\n")
    assert path.read_text() == "before\n" and [p.name for p in tmp_path.iterdir()] == ["table.md"]


def test_write_chunks_writes_a_stream_whole_or_leaves_the_previous_file(tmp_path):
    path = tmp_path / "out.txt"
    atomic.write_chunks(path, (f"{i}\n".encode() for i in range(3)))
    assert path.read_bytes() == b"0\n1\n2\n"

    def broken():
        yield b"half"
        raise ValueError("a shard changed")

    with pytest.raises(ValueError, match="a shard changed"):
        atomic.write_chunks(path, broken())
    assert path.read_bytes() == b"0\n1\n2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_sha256_file_of_the_bytes_or_of_the_decompressed_content(tmp_path):
    data = b"x" * (3 << 20)  # more than one block
    (tmp_path / "a").write_bytes(data)
    (tmp_path / "a.gz").write_bytes(gzip.compress(data))
    digest = hashlib.sha256(data).hexdigest()
    assert atomic.sha256_file(tmp_path / "a") == atomic.sha256_file(tmp_path / "a.gz", gunzip=True) == digest
    assert (
        atomic.sha256_file(tmp_path / "a.gz") == hashlib.sha256((tmp_path / "a.gz").read_bytes()).hexdigest()
    )


# ----------------------------------------------------------------------------- durable replacement (fsync)
def test_replace_dir_deletes_the_old_copy_only_after_the_rename_is_on_disk(tmp_path, monkeypatch):
    """The old directory is deleted only after the parent directory is fsync'ed, so that a power
    cut cannot lose both the old and the new one."""
    from nmt import atomic

    events = []
    real_rename, real_rmtree, real_fsync_dir = os.rename, shutil.rmtree, atomic.fsync_dir
    monkeypatch.setattr(
        os,
        "rename",
        lambda s, d: (events.append(("rename", Path(s).name, Path(d).name)), real_rename(s, d))[1],
    )
    monkeypatch.setattr(
        shutil,
        "rmtree",
        lambda p, *a, **k: (events.append(("rmtree", Path(p).name[:10])), real_rmtree(p, *a, **k))[1],
    )
    monkeypatch.setattr(
        atomic, "fsync_dir", lambda p: (events.append(("fsync", Path(p).name)), real_fsync_dir(p))[1]
    )
    for name in ("best", "new"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f").write_text(name)
    atomic.replace_dir(tmp_path / "new", tmp_path / "best")
    assert (tmp_path / "best" / "f").read_text() == "new"
    aside = events[0][2]
    assert events == [
        ("rename", "best", aside),
        ("rename", "new", "best"),
        ("fsync", tmp_path.name),
        ("rmtree", ".best.old-"),
    ]
