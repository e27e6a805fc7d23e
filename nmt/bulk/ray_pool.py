"""A job's shards translated by a pool of Ray Data actors (`nmt translate-shards run --ray`; the
optional extra ``nmt[ray]``): a dataset of the shards' numbers mapped by translator actors, each of
which loads its translator once and writes each shard it is given into the job's folder, as a local
worker does (on a cluster, JOB is on a filesystem every node mounts). A local Ray (``ray.init()``,
shut down at the end) or a cluster's address. Ray Data restarts an actor that dies and gives its
shard to it again: a killed actor costs the shard it was translating. A shard whose actor dies
``RETRIES`` + 1 times (one that runs out of memory each time) stops the run as a dead local worker
does: the finished shards are on disk, and a rerun translates the others."""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import UserError
from .local_pool import Worker, WorkerDied
from .shards import ShardError

RETRIES = 2  # the times a shard is given again after its actor died (Ray Data's default: forever)


class ShardActor:
    """One translator actor: ``worker.start`` once, then each batch's shards through ``worker.work``."""

    def __init__(self, worker: Worker):
        worker.start(*worker.args)
        self.work = worker.work

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        shards = [int(k) for k in batch["shard"]]
        return {"shard": np.array(shards), "lines": np.array([self.work(k) for k in shards])}


def run_ray(
    todo: list[int],
    *,
    worker: Worker,
    actors: int,
    address: str,
    gpus: bool,
    on_done: Callable[[int, int], None],
) -> None:
    """The shards ``todo`` translated by up to ``actors`` ShardActors of Ray at ``address`` ("": a
    local Ray, unless one is running), each with one GPU (``gpus``) or ``worker.args[1]`` CPUs (its
    threads); ``on_done(index, lines)`` here as each comes back; a shard's user error raised here;
    WorkerDied where a shard's actor died more than RETRIES times."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise ShardError("--ray needs Ray Data: pip install 'nmt[ray]'") from None
    try:
        with ray_session(ray, address):
            for index, lines in shard_results(todo, worker=worker, actors=actors, gpus=gpus):
                on_done(index, lines)
    except Exception as e:  # Ray wraps a shard's error: the user error inside it, as it is
        cause = user_error_in(e) or actor_death_in(e)
        if cause is None:
            raise
        raise cause from None


@contextmanager
def ray_session(ray, address: str) -> Iterator[None]:
    """Ray, connected for a pool: the Ray this process runs, as it is; else a local one (``address``
    "") or the cluster at ``address``, connected here and shut down at the end (a local Ray's
    processes with it), whatever happens."""
    if ray.is_initialized():
        yield
        return
    local = {} if address else {"include_dashboard": False, "log_to_driver": False}
    ray.init(address=address or None, **local)
    try:
        yield
    finally:
        ray.shutdown()


def shard_results(todo: list[int], *, worker: Worker, actors: int, gpus: bool) -> Iterator[tuple[int, int]]:
    """(index, output lines) of each shard of ``todo`` as Ray Data's actors finish it."""
    import ray.data

    ray.data.DataContext.get_current().enable_progress_bars = False
    # the shards' numbers in the driver (from_items: no read task that would wait for the actors' CPUs)
    dataset = ray.data.from_items([{"shard": k} for k in todo], override_num_blocks=len(todo))
    resources = {"num_gpus": 1} if gpus else {"num_cpus": max(1, worker.args[1])}
    with warnings.catch_warnings():
        # max_restarts and max_task_retries have no named parameter in Ray 2.60 (the extra's pin): they
        # go as ray_remote_args, which it calls deprecated
        warnings.filterwarnings("ignore", "`ray_remote_args` is deprecated", DeprecationWarning)
        mapped = dataset.map_batches(
            ShardActor,
            fn_constructor_args=(worker,),
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
            # the driver's NMT_* variables (NMT_PRECISION, ...), which local workers inherit
            runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k.startswith("NMT_")}},
            max_restarts=-1,  # an actor that dies is restarted (Ray Data's default) ...
            max_task_retries=RETRIES,  # ... and its shard given again, RETRIES times
            **resources,
        )
    for row in mapped.iter_rows():
        yield int(row["shard"]), int(row["lines"])


def causes(error: BaseException) -> Iterator[BaseException]:
    """An exception and its causes (Ray's wrappers of a task's error keep it as ``cause``)."""
    seen = set()
    while error is not None and id(error) not in seen:
        yield error
        seen.add(id(error))
        error = error.__cause__ or getattr(error, "cause", None) or error.__context__


def user_error_in(error: BaseException) -> UserError | None:
    """The UserError among an exception's causes (Ray's wrappers of a task's error), or None."""
    for e in causes(error):
        if isinstance(e, UserError) and type(e).__module__.startswith("nmt."):
            return e
    return None


def actor_death_in(error: BaseException) -> WorkerDied | None:
    """WorkerDied where an exception's causes hold the death of an actor's process (or of its node)
    that Ray gave up retrying, else None (an actor whose ``__init__`` raised is a bug: as it is)."""
    from ray import exceptions

    died = (exceptions.RayActorError, exceptions.WorkerCrashedError, exceptions.NodeDiedError)
    for e in causes(error):
        if isinstance(e, exceptions.OutOfMemoryError) or (
            isinstance(e, died) and not getattr(e, "actor_init_failed", False)
        ):
            return WorkerDied(
                f"a Ray actor died {RETRIES + 1} times translating one shard (killed, or out of memory)"
            )
    return None
