"""Workers for the pools' tests (nmt.bulk.local_pool, nmt.bulk.ray_pool): module functions, so that
spawned processes and Ray actors find them by name; the input and the options of the sharded jobs'
tests (tests/test_bulk_command.py, tests/test_ray_pool.py)."""

from __future__ import annotations

import os
from pathlib import Path

from nmt.bulk.shards import ShardError

# fp32: float32 CPU layers are batch-invariant, so shards batch their lines as they like
FAST = ["--precision", "fp32", "--beam", "2", "--max-len-a", "0", "--max-len-b", "3", "--quiet"]
LINES = [
    "der hund laeuft.",
    "",
    "ein baum und eine katze. die katze springt!",
    "DER HUND LAEUFT UNTER DEM BAUM.",
    "blau rot gross",
    "das haus",
    "<b>ein</b> hund neben dem haus.",
    "klein",
    "die katze und der hund.",
    "rot",
    "mit dem baum auf dem haus",
]

STARTED: list = []  # the arguments start was called with, in this process


def start(*args) -> None:
    STARTED.append(args)


def square(index: int) -> int:
    """A shard's "output lines": index squared; shard 3 a user error, as a bad option would be."""
    if index == 3:
        raise ShardError("shard 3: refused")
    return index * index


def dies_on_3(index: int) -> int:
    """As ``square``, but the process given shard 3 dies at once (as one killed, or out of memory),
    every time, leaving a file ``try-PID`` in the folder ``start`` was given first."""
    if index == 3:
        (Path(STARTED[0][0]) / f"try-{os.getpid()}").touch()
        os._exit(70)
    return index * index


def pid(index: int) -> int:
    return os.getpid()
