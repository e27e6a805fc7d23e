"""Atomic replacement of a directory: the one way nmt swaps a finished output (a checkpoint,
`best`, an averaged model, a prepared corpus, an export) into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_dir(new: Path, directory: Path) -> None:
    """Rename directory ``new`` to ``directory``. An existing one is renamed aside first (to
    ``.NAME.old-*/ckpt``) and deleted only after the new one is in place: the old one is never
    lost. An error between the two renames puts it back; after a kill between them `resolve`
    finds it aside and `clean_stale` puts it back."""
    if directory.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
        os.rename(directory, old / "ckpt")
        try:
            os.rename(new, directory)
        except BaseException:
            os.rename(old / "ckpt", directory)
            shutil.rmtree(old, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, directory)
    fsync_dir(directory.parent)
