"""Ray Data's actors (nmt.bulk.ray_pool) on a local Ray of 2 CPUs, through `nmt translate-shards run
--ray`: the output is `nmt translate`'s byte for byte, and an actor killed mid-shard is restarted by
Ray, its shard translated again, the same output in one run. Skipped where Ray Data is not installed
(the extra nmt[ray]; not part of the test install: a local Ray takes several seconds to start)."""

from __future__ import annotations

import pytest

from nmt.bulk import command as bulk
from nmt.bulk.ray_pool import user_error_in
from nmt.bulk.shards import ShardError
from nmt.cli import main

FAST = ["--precision", "fp32", "--beam", "2", "--max-len-a", "0", "--max-len-b", "3", "--quiet"]
LINES = ["der hund laeuft.", "", "ein baum und eine katze. die katze springt!", "blau rot gross", "das haus"]


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


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'nmt[ray]')")
    pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'nmt[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.mark.slow  # over 3 s on 2 cores: a local Ray and its actors start
def test_ray_actors_write_nmt_translates_output_and_a_killed_actors_shard_is_retried(
    local_ray, tiny_checkpoint, tmp_path, monkeypatch
):
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES * 2))
    single = tmp_path / "single.txt"
    assert main(["translate", str(tiny_checkpoint), "-i", str(source), "-o", str(single), *FAST]) == 0
    argv = ["--shard-lines", "3", str(tiny_checkpoint), "-i", str(source), *FAST, "--ray", "--workers", "2"]
    out = tmp_path / "out.txt"
    assert main(["translate-shards", "run", "--job", str(tmp_path / "job"), *argv, "-o", str(out)]) == 0
    assert out.read_bytes() == single.read_bytes()
    monkeypatch.setenv(bulk.CRASH, "2")  # the actor of shard 2 exits before writing it, once
    killed = tmp_path / "killed.txt"
    assert main(["translate-shards", "run", "--job", str(tmp_path / "job2"), *argv, "-o", str(killed)]) == 0
    assert (tmp_path / "job2" / ".crashed-2").exists()
    assert killed.read_bytes() == single.read_bytes()
