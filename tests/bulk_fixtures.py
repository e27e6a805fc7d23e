"""Workers for the pools' tests (nmt.bulk.local_pool, nmt.bulk.ray_pool): module functions, so that
spawned processes and Ray actors find them by name."""

from __future__ import annotations

import os

from nmt.bulk.shards import ShardError

STARTED: list = []  # the arguments start was called with, in this process


def start(*args) -> None:
    STARTED.append(args)


def square(index: int) -> int:
    """A shard's "output lines": index squared; shard 3 a user error, as a bad option would be."""
    if index == 3:
        raise ShardError("shard 3: refused")
    return index * index


def pid(index: int) -> int:
    return os.getpid()
