"""A job's shards translated by a pool of Ray Data actors (`nmt translate-shards run --ray`; the
optional extra ``nmt[ray]``): a dataset of the shards' numbers mapped by translator actors, each of
which loads its translator once and writes each shard it is given into the job's folder, as a local
worker does (on a cluster, JOB is on a filesystem every node mounts). A local Ray (``ray.init()``)
or a cluster's address. Ray Data restarts an actor that dies and gives its shard to another: a
killed actor costs the shard it was translating."""

from __future__ import annotations

import os
from typing import Callable

from ..errors import UserError
from .local_pool import Worker
from .shards import ShardError


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
    threads); ``on_done(index, lines)`` here as each comes back; a shard's user error raised here."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise ShardError("--ray needs Ray Data: pip install 'nmt[ray]'") from None
    if not ray.is_initialized():
        local = {} if address else {"include_dashboard": False, "log_to_driver": False}
        ray.init(address=address or None, **local)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    # the shards' numbers in the driver (from_items: no read task that would wait for the actors' CPUs)
    dataset = ray.data.from_items([{"shard": k} for k in todo], override_num_blocks=len(todo))
    resources = {"num_gpus": 1} if gpus else {"num_cpus": max(1, worker.args[1])}
    mapped = dataset.map_batches(
        ShardActor,
        fn_constructor_args=(worker,),
        batch_size=1,
        compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
        # the driver's NMT_* variables (NMT_PRECISION, ...), which local workers inherit
        runtime_env={"env_vars": {k: v for k, v in os.environ.items() if k.startswith("NMT_")}},
        **resources,
    )
    try:
        for row in mapped.iter_rows():
            on_done(int(row["shard"]), int(row["lines"]))
    except Exception as e:  # Ray wraps a shard's error: the user error inside it, as it is
        cause = user_error_in(e)
        if cause is None:
            raise
        raise cause from None


def user_error_in(error: BaseException) -> UserError | None:
    """The UserError among an exception's causes (Ray's wrappers of a task's error), or None."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, UserError) and type(error).__module__.startswith("nmt."):
            return error
        seen.add(id(error))
        error = error.__cause__ or getattr(error, "cause", None) or error.__context__
    return None
