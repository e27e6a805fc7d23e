"""nmt/train/run_dir.py: one owner per run directory (train.lock, with or without flock), the free-space
check (keep_last counted, on resume too), config.json written whole or not at all."""

from __future__ import annotations

import json
import os
import shutil

from train_fixtures import tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.train.run_dir import checkpoint_step, trim_metrics

TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    return main(["train", str(data), "--out", str(out), *TINY, *extra])


def test_disk_check_counts_keep_last_and_leaves_no_stuck_run(tiny_data, tmp_path, monkeypatch, capsys):
    """The early disk check asks room for keep_last checkpoints (with best and one being written),
    not for one, and fails before it writes config.json, so that the directory is not stuck."""
    import nmt.train.run_dir as run_dir

    class Usage:
        free = 0

    run = tmp_path / "run"
    assert train(tiny_data, tmp_path / "probe", "--train.max_steps=1") == 0
    each = sum(
        f.stat().st_size
        for f in (ckpt.list_step_checkpoints(tmp_path / "probe")[0]).iterdir()
        if f.suffix == ".safetensors"
    )
    Usage.free = 4 * each  # room for 3 checkpoints, not for keep_last=10 + best + one being written
    monkeypatch.setattr(run_dir.shutil, "disk_usage", lambda path: Usage)
    assert train(tiny_data, run, "--train.max_steps=1", "--train.keep_last=10") == 2
    err = capsys.readouterr().err
    assert "keep_last=10 checkpoints" in err and "lower --train.keep_last" in err
    assert not (run / "config.json").exists()
    assert train(tiny_data, run, "--train.max_steps=1", "--train.keep_last=2") == 0


# ----------------------------------------------------------------------------- locks, disks, data
def test_finished_run_leaves_no_lock_and_a_dead_owners_lock_is_taken_over(tiny_data, tmp_path):
    """RUN/train.lock names its owner while a run lives; a killed owner's file
    (the kernel released its lock) does not block the next start."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.lock").write_text(
        json.dumps({"host": "elsewhere", "pid": 1, "started": "yesterday"}) + "\n"
    )
    assert train(tiny_data, run, "--train.max_steps=1") == 0
    assert not (run / "train.lock").exists()


def test_lock_without_flock_judges_the_owner_by_its_pid(tiny_data, tmp_path, monkeypatch, capsys):
    """On a file system without locks (flock fails), a lock file naming a live
    process of this host, or any process of another host, refuses the start (saying how to clear a
    stale lock) and changes nothing; one naming a dead process of this host is taken over."""
    import fcntl
    import socket
    import subprocess

    def no_locks(f, op):
        raise OSError(37, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    run, host = tmp_path / "run", socket.gethostname()
    run.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    for owner, refused in (
        ({"host": host, "pid": os.getppid()}, True),
        ({"host": "node7", "pid": 12}, True),
        ({"host": host, "pid": dead.pid}, False),
    ):
        text = json.dumps({**owner, "started": "2026-11-26 12:00:00"}) + "\n"
        (run / "train.lock").write_text(text)
        assert train(tiny_data, run, "--train.max_steps=1") == (2 if refused else 0)
        err = capsys.readouterr().err
        if refused:
            lock = run / "train.lock"
            assert err.strip() == (
                f"nmt train: error: {run} is in use by another `nmt train` (pid {owner['pid']} on host "
                f"{owner['host']} since 2026-11-26 12:00:00; lock file {lock}): wait for it to end, "
                "stop it, or "
                f"choose another --out; if that process no longer runs (its machine went down), the lock is "
                f"stale: delete {lock} and start again"
            )
            assert sorted(p.name for p in run.iterdir()) == ["train.lock"] and lock.read_text() == text
    assert ckpt.list_step_checkpoints(run) and not (run / "train.lock").exists()


def test_free_space_is_checked_on_resume_too(tiny_data, finished_run_copy, monkeypatch, capsys):
    """The disk check runs on resume as on a fresh start; on resume the run's own checkpoints count
    as room (they are replaced, not added to)."""
    import nmt.train.run_dir as run_dir

    class Usage:
        free = 0

    monkeypatch.setattr(run_dir.shutil, "disk_usage", lambda path: Usage)
    before = sorted((str(p), p.stat().st_mtime_ns) for p in finished_run_copy.rglob("*"))
    argv = ["train", str(tiny_data), "--out", str(finished_run_copy), "--resume", "--train.max_steps=3"]
    assert main([*argv, "--train.keep_last=10"]) == 2
    err = capsys.readouterr().err
    assert (
        "keep_last=10 checkpoints" in err
        and "MB of them held already" in err
        and "lower --train.keep_last" in err
    )
    assert sorted((str(p), p.stat().st_mtime_ns) for p in finished_run_copy.rglob("*")) == before
    assert main([*argv, "--train.keep_last=1"]) == 0  # step_1, step_2 and best hold room for 1 + best + 1


def test_config_json_is_written_whole_or_not_at_all(tiny_data, finished_run_copy, capfd):
    """config.json is written whole or not at all: a full disk (here RLIMIT_FSIZE) does not leave it
    cut, on which `--resume auto` would fail for good."""
    import resource

    shutil.rmtree(finished_run_copy / "checkpoints")  # a start killed before its first checkpoint: restarted
    before = (finished_run_copy / "config.json").read_text()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) // 2, resource.RLIM_INFINITY))
            # on the CPU: a forked child cannot use CUDA where this process already has
            code = train(tiny_data, finished_run_copy, "--train.max_steps=2", "--device", "cpu")
        finally:
            os._exit(code)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 2
    assert capfd.readouterr().err.strip().splitlines()[-1] == (
        f"nmt train: error: could not write {finished_run_copy / 'config.json'}: File too large (free some "
        "space, then "
        "start again)"
    )
    assert (finished_run_copy / "config.json").read_text() == before
    assert not [p.name for p in finished_run_copy.iterdir() if p.name.startswith(".")]


def test_metrics_past_the_checkpoint_go_whether_they_say_update_or_step(tmp_path):
    """A run begun when metrics.jsonl said "step" and resumed since holds both kinds of record: a
    resume from update 3 drops the records past it of either kind, and a last line cut by a kill."""
    path = tmp_path / "metrics.jsonl"
    lines = [
        {"split": "train", "step": 1},
        {"split": "valid", "step": 2},
        {"split": "train", "update": 3},
        {"split": "train", "step": 4},
        {"split": "train", "update": 5},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"split": "tr')
    trim_metrics(path, 3)
    assert [json.loads(line) for line in path.read_text().splitlines()] == lines[:3]


def test_the_update_of_a_checkpoint_is_its_update_or_the_step_an_older_run_saved(tmp_path):
    for key in ("update", "step"):
        (tmp_path / key).mkdir()
        (tmp_path / key / "trainer_state.json").write_text(json.dumps({key: 7, "epoch": 1}))
        assert checkpoint_step(tmp_path / key) == 7
    assert checkpoint_step(tmp_path / "missing") is None
