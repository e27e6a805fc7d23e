"""Files written whole: atomic replacement of a directory, the one way nmt swaps a finished output (a
checkpoint, `best`, an averaged model, a prepared corpus, an export) into place; the one atomic file
writer (`write_bytes`, `write_text`, `write_chunks` for a stream); and the one sha256 of a file
(`sha256_file`)."""

from __future__ import annotations

import gzip
import hashlib
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

ASIDE = "ckpt"  # `.NAME.old-*/ckpt`: where `replace_dir` sets the previous directory aside


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_files(directory: Path) -> None:
    """fsync every file directly inside ``directory``, then the directory itself."""
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    fsync_dir(directory)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``path`` as a whole or not at all: a new temporary sibling ``.NAME.tmp-*`` (created with
    the permissions a plain open gives, 0666 less the umask), fsync'ed, renamed over it, the folder
    fsync'ed. A failure (a full disk) or a kill leaves the previous file as it was; two writers never
    share a temporary."""
    write_chunks(path, [data])


def write_chunks(path: str | Path, chunks: Iterable[bytes]) -> None:
    """`write_bytes` of the concatenation of ``chunks``, written as they come (a file larger than
    memory); an exception raised by the iterator leaves the previous file as it was."""
    path = Path(path)
    while True:
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            for data in chunks:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_text(path: str | Path, text: str) -> None:
    """`write_bytes` of ``text`` in UTF-8 (lines end as they are in ``text``)."""
    write_bytes(path, text.encode("utf-8"))


def sha256_file(path: str | Path, *, gunzip: bool = False) -> str:
    """The sha256 hex digest of a file's bytes (or with ``gunzip`` of its decompressed content), read
    in 1 MiB blocks: checkpoint manifests, --init records, downloads, prepared inputs."""
    h = hashlib.sha256()
    with gzip.open(path, "rb") if gunzip else open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def replace_dir(new: Path, directory: Path) -> None:
    """Rename directory ``new`` to ``directory``. An existing one is renamed aside first (to
    ``.NAME.old-*/ckpt``) and deleted only once the new one is in place and that rename is on disk
    (the parent directory fsync'ed): the old one is never lost. An error between the two renames
    puts it back; after a kill between them `restore_aside` (and `checkpoint.clean_stale`) puts
    it back, and `checkpoint.resolve_checkpoint` finds it aside meanwhile."""
    if directory.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
        os.rename(directory, old / ASIDE)
        try:
            os.rename(new, directory)
        except BaseException:
            os.rename(old / ASIDE, directory)
            shutil.rmtree(old, ignore_errors=True)
            raise
        fsync_dir(directory.parent)  # the new one is durably in place before the old one goes
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, directory)
        fsync_dir(directory.parent)


def restore_aside(directory: Path) -> list[str]:
    """Finish a `replace_dir` that a kill interrupted: with ``directory`` missing, the newest
    complete ``.NAME.old-*/ckpt`` is put back; other ``.NAME.old-*`` folders (set aside for a
    successor that is now in place) are deleted. Returns what it did, one phrase each. Call it
    only when no other process replaces ``directory``."""
    done = []
    aside = sorted(directory.parent.glob(f".{directory.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if not directory.exists():
        complete = [p for p in aside if (p / ASIDE).is_dir()]
        if complete:
            os.rename(complete[-1] / ASIDE, directory)
            fsync_dir(directory.parent)
            done.append(f"{complete[-1].name} (restored as {directory.name})")
    for p in aside:
        shutil.rmtree(p, ignore_errors=True)
        if f"{p.name} (restored as {directory.name})" not in done:
            done.append(p.name)
    return done
