"""Ray Data's actors (nmt.bulk.ray_pool) on one local Ray of 2 CPUs, started once for the module (the
extra nmt[ray], in the test install; the tests that need it skip with a message without it): through
`nmt translate-shards run --ray`, the output is `nmt translate`'s byte for byte, plain text with two
actors and HTML with one; an actor killed mid-shard is restarted by Ray and its shard translated again
within the run, and a run of a job stopped halfway translates only the shards not finished; a shard
whose actor dies every time is tried RETRIES + 1 times, then the run stops as when a local worker
dies (WorkerDied: the command says to rerun it); a Ray the pool starts is shut down, one running is
left running. A job planned for another input or other options is refused before any pool starts:
tests/test_bulk_command.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace

import bulk_fixtures
import pytest
from bulk_fixtures import FAST, LINES

from nmt.bulk import command as bulk
from nmt.bulk.local_pool import Worker, WorkerDied
from nmt.bulk.ray_pool import RETRIES, actor_death_in, ray_session, run_ray, user_error_in
from nmt.bulk.shards import ShardError
from nmt.cli import main

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module, started as light as it starts: 2 CPUs, no dashboard, no metrics,
    no workers started ahead (each test's actors need their own), a small object store (it holds the
    shards' numbers); tests/ on the workers' path (bulk_fixtures' workers). Shut down at the end, its
    processes with it; what ray.init set in this process (a SIGTERM handler, RAY_AUTH_MODE,
    PYTHONBREAKPOINT, ...) put back for the next tests."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'nmt[ray]')")
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'nmt[ray]')")
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    sigterm, environ = signal.getsignal(signal.SIGTERM), dict(os.environ)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=80 * 1024 * 1024,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
        _system_config={
            "enable_worker_prestart": False,
            "prestart_worker_first_driver": False,
            "enable_metrics_collection": False,
        },
    )
    yield ray
    ray.shutdown()
    if sigterm is not None:
        signal.signal(signal.SIGTERM, sigterm)
    for name in set(os.environ) - set(environ):
        del os.environ[name]
    os.environ.update(environ)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    path = tmp_path_factory.mktemp("ray") / "in.txt"
    path.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return path


def translate(checkpoint, source, out, *extra) -> bytes:
    """`nmt translate`'s output of ``source`` with FAST and ``extra``."""
    assert main(["translate", str(checkpoint), "-i", str(source), "-o", str(out), *FAST, *extra]) == 0
    return out.read_bytes()


def shards(action: str, job, *argv) -> int:
    return main(["translate-shards", action, "--job", str(job), *map(str, argv)])


def test_the_user_error_inside_a_wrapped_error_is_found():
    error = ShardError("shard 3: refused")
    try:
        try:
            raise error
        except ShardError as e:
            raise RuntimeError("a task failed") from e
    except RuntimeError as wrapped:
        assert user_error_in(wrapped) is error
    assert user_error_in(RuntimeError("no cause")) is None


def test_an_actor_ray_gave_up_on_is_a_dead_worker_and_one_whose_init_raised_is_left_as_it_is():
    exceptions = pytest.importorskip("ray.exceptions", reason="Ray is not installed (pip install 'nmt[ray]')")
    try:
        try:
            raise exceptions.ActorDiedError()
        except exceptions.ActorDiedError as e:
            raise RuntimeError("the stream of results ended") from e
    except RuntimeError as wrapped:
        assert isinstance(actor_death_in(wrapped), WorkerDied)
    assert actor_death_in(exceptions.RayActorError(actor_init_failed=True)) is None  # a bug: as it is
    assert actor_death_in(RuntimeError("no cause")) is None


def test_a_ray_the_pool_starts_is_shut_down_whatever_happens_and_one_running_is_left_running():
    calls = []
    fake = SimpleNamespace(
        is_initialized=lambda: False,
        init=lambda **kw: calls.append(("init", kw)),
        shutdown=lambda: calls.append(("shutdown",)),
    )
    with pytest.raises(ShardError), ray_session(fake, ""):
        raise ShardError("shard 1: refused")
    assert calls == [
        ("init", {"address": None, "include_dashboard": False, "log_to_driver": False}),
        ("shutdown",),
    ]
    calls.clear()
    with ray_session(fake, "ray://head:10001"):
        pass
    assert calls == [("init", {"address": "ray://head:10001"}), ("shutdown",)]
    calls.clear()
    fake.is_initialized = lambda: True
    with ray_session(fake, ""):
        pass
    assert calls == []


@pytest.mark.slow  # a local Ray and its actors start: several seconds on 2 cores
def test_ray_actors_write_nmt_translates_output_byte_for_byte(local_ray, tiny_checkpoint, source, tmp_path):
    single = translate(tiny_checkpoint, source, tmp_path / "single.txt")
    job, out = tmp_path / "job", tmp_path / "out.txt"
    argv = ["--shard-lines", 4, tiny_checkpoint, "-i", source, "-o", out, *FAST, "--ray", "--workers", 2]
    assert shards("run", job, *argv) == 0
    assert out.read_bytes() == single
    assert len(list((job / "shards").glob("*.done"))) == 3


@pytest.mark.slow  # a local Ray and its actors start, one of them twice
def test_an_actor_killed_mid_shard_is_restarted_and_a_rerun_translates_only_the_shards_not_finished(
    local_ray, tiny_checkpoint, source, tmp_path, monkeypatch
):
    single = translate(tiny_checkpoint, source, tmp_path / "single.txt", "--format", "html")
    job, out = tmp_path / "job", tmp_path / "out.txt"
    argv = ["--shard-lines", 4, tiny_checkpoint, "-i", source, "-o", out, *FAST, "--format", "html"]
    assert shards("plan", job, *argv) == 0
    assert shards("work", job, "--shard", 0) == 0  # as a run stopped after its first shard leaves it
    first = (job / "shards" / "00000.out").stat().st_mtime_ns
    monkeypatch.setenv(bulk.CRASH, "2")  # the actor of shard 2 exits before writing it, once
    assert shards("run", job, *argv, "--ray", "--workers", 1) == 0
    assert (job / ".crashed-2").exists()  # it died, and Ray's retry wrote the shard
    assert out.read_bytes() == single
    assert (job / "shards" / "00000.out").stat().st_mtime_ns == first  # not translated again


@pytest.mark.slow  # a local Ray and its actors start, one of them RETRIES + 1 times
def test_a_shard_whose_actor_dies_every_time_is_tried_retries_plus_one_times_then_the_run_stops(
    local_ray, tmp_path
):
    worker = Worker(bulk_fixtures.start, (str(tmp_path), 1), bulk_fixtures.dies_on_3)
    with pytest.raises(WorkerDied, match=f"a Ray actor died {RETRIES + 1} times translating one shard"):
        run_ray([3, 0, 1, 2], worker=worker, actors=1, address="", gpus=False, on_done=lambda k, n: None)
    assert len(list(tmp_path.glob("try-*"))) == RETRIES + 1
