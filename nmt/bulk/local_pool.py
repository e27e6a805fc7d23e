"""A job's shards translated by worker processes on this machine (the default of `nmt
translate-shards run`; no dependency beyond the standard library): each process starts once (loads
its translator, with its own torch threads) and then translates shard after shard as they come.
One worker translates in this process. A worker that dies (killed, out of memory) stops the pool:
the shards finished are on disk, and a rerun translates the others."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Worker:
    """What a worker runs: ``start(*args)`` once (its translator), then ``work(index)`` per shard,
    which returns the shard's output lines; module-level functions, so that they pickle by name."""

    start: Callable
    args: tuple
    work: Callable[[int], int]


class WorkerDied(Exception):
    """A worker process ended without finishing its shard."""


def run_local(todo: list[int], *, worker: Worker, workers: int, on_done: Callable[[int, int], None]) -> None:
    """The shards ``todo`` translated by ``workers`` processes (1: this one), ``on_done(index,
    lines)`` in this process after each; an error of a shard (a user error) is raised here once the
    others have stopped; WorkerDied where a process died."""
    if workers <= 1:
        worker.start(*worker.args)
        for index in todo:
            on_done(index, worker.work(index))
        return
    # spawn: a fresh interpreter per worker (forking a process whose torch runs threads is unsafe)
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=worker.start, initargs=worker.args
    )
    try:
        pending = {pool.submit(worker.work, index): index for index in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                index = pending.pop(future)
                on_done(index, future.result())
    except BrokenProcessPool:
        raise WorkerDied("a worker process died (killed, or out of memory)") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
