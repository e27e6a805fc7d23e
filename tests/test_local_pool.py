"""Worker processes on this machine (nmt.bulk.local_pool) with workers that compute a number per shard:
one worker in this process, in order; several in processes of their own, each shard once; a shard's
user error raised in the caller. A worker killed mid-shard: tests/test_bulk_command.py."""

from __future__ import annotations

import os

import bulk_fixtures
import pytest

from nmt.bulk.local_pool import Worker, run_local
from nmt.bulk.shards import ShardError


def test_one_worker_starts_once_in_this_process_and_takes_the_shards_in_order(monkeypatch):
    monkeypatch.setattr(bulk_fixtures, "STARTED", [])
    done = []
    worker = Worker(bulk_fixtures.start, ("job", 2), bulk_fixtures.square)
    run_local([0, 2, 1], worker=worker, workers=1, on_done=lambda k, n: done.append((k, n)))
    assert done == [(0, 0), (2, 4), (1, 1)]
    assert bulk_fixtures.STARTED == [("job", 2)]


def test_worker_processes_take_each_shard_once_and_a_shards_user_error_is_raised_here():
    done = {}
    worker = Worker(bulk_fixtures.start, (), bulk_fixtures.pid)
    run_local([0, 1, 2, 3, 4], worker=worker, workers=2, on_done=lambda k, n: done.setdefault(k, n))
    assert sorted(done) == [0, 1, 2, 3, 4]
    assert os.getpid() not in done.values()
    with pytest.raises(ShardError, match="shard 3: refused"):
        run_local([3], worker=Worker(bulk_fixtures.start, (), bulk_fixtures.square), workers=2, on_done=print)
