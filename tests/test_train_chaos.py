"""Training chaos: two `nmt train` on one run directory, a SIGKILL at every phase of saving
a checkpoint and of replacing `best`, a corrupt latest checkpoint under --resume auto, a log that
cannot be written (RLIMIT_FSIZE, as a full disk), SIGINT and SIGTERM during validation and between
updates. In every case the run stops with one clear line (or is killed), then resumes to the
weights, the best model and the metrics of the uninterrupted run: nothing is lost.

A killed run is a forked child (the modules are loaded once: fast) that SIGKILLs itself at the
chosen point, so no `finally` or `except` of nmt runs, as with a real kill.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import time
import traceback
from pathlib import Path

import pytest
from train_fixtures import tiny_args

from nmt import atomic
from nmt import checkpoint as ckpt
from nmt.cli import main
from nmt.train import trainer as trainer_module

# validation as each test sets it (TINY's valid_every_steps=0 left out)
TINY = tiny_args(
    "--train.max_tokens=512",
    "--train.log_every_steps=1",
    leave_out=("--train.valid_every_steps=0",),
)
# validations at updates 1 and 2 (both improve: best moves from step_1 to step_2), keep_last=1 (step_1
# is deleted at update 2): every phase of saving, replacing best and rotating happens at update 2
RUN = [
    *TINY,
    "--train.max_steps=2",
    "--train.save_every_steps=1",
    "--train.valid_every_steps=1",
    "--train.keep_last=1",
]


def train(data, run, *extra) -> int:
    return main(["train", str(data), "--out", str(run), *RUN, *extra])


def resume(data, run, *extra) -> int:
    return main(["train", str(data), "--out", str(run), "--resume", "auto", *extra])


def sigkill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def forked(body) -> int:
    """Run ``body()`` (returning an exit status) in a forked child; its status, -9 if SIGKILLed."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            code = body()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def kill_when(owner, name: str, predicate) -> None:
    """In a child: replace ``owner.name`` by a version that SIGKILLs when ``predicate(*args)``."""
    real = getattr(owner, name)

    def wrapper(*args, **kwargs):
        if predicate(*args, **kwargs):
            sigkill()
        return real(*args, **kwargs)

    setattr(owner, name, wrapper)


def model_sha(directory: Path) -> str:
    return json.loads((directory / ckpt.MANIFEST).read_text())["model.safetensors"]["sha256"]


def state(directory: Path) -> dict:
    return json.loads((directory / "trainer_state.json").read_text())


def records(run: Path) -> list[tuple]:
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["split"] != "padding":
            out.append((r["split"], r["update"], r["loss"]))
    return out


@pytest.fixture(scope="module")
def straight_run(tiny_data, tmp_path_factory) -> Path:
    """The uninterrupted run every interrupted one must end as."""
    run = tmp_path_factory.mktemp("straight") / "run"
    assert train(tiny_data, run) == 0
    assert state(run / "checkpoints" / "best")["update"] == 2
    return run


def assert_same_as_straight(run: Path, straight: Path) -> None:
    """Same checkpoints, same final weights and optimizer, same best, same metrics; nothing left over."""
    names = [p.name for p in ckpt.list_step_checkpoints(run)]
    assert names == [p.name for p in ckpt.list_step_checkpoints(straight)] == ["step_00000002"]
    for name in ("step_00000002", "best"):
        ckpt.verify(run / "checkpoints" / name)
        a, b = (json.loads((r / "checkpoints" / name / ckpt.MANIFEST).read_text()) for r in (run, straight))
        for f in ("model.safetensors", "optimizer.safetensors"):
            assert a[f]["sha256"] == b[f]["sha256"], (name, f)
    assert records(run) == records(straight)
    for name in ("step_00000002", "best"):
        assert state(run / "checkpoints" / name).get("best_step") == 2
    assert not [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]
    assert not (run / "train.lock").exists()


def best_is_recoverable(run: Path) -> None:
    """The best model so far (the best step the newest complete checkpoint names) is a complete
    checkpoint somewhere: `best`, set aside by a replacement, or its step checkpoint."""
    newest = ckpt.list_step_checkpoints(run)[-1]
    ckpt.verify(newest)
    best_step = state(newest).get(
        "best_step", newest.name == "step_00000002" and 2 or 1
    )  # a checkpoint that records no best_step: the better score
    folder = run / "checkpoints"
    places = [
        folder / "best",
        *[p / "ckpt" for p in folder.glob(".best.old-*")],
        folder / f"step_{best_step:08d}",
    ]
    found = []
    for place in places:
        try:
            ckpt.verify(place)
        except ckpt.CheckpointError:
            continue
        found.append(state(place)["update"])
    assert best_step in found, (best_step, found)


# ----------------------------------------------------------------------------- one owner
@pytest.mark.parametrize("pause_at", [0, 1])
def test_second_train_on_a_live_run_is_refused_and_touches_nothing(
    tiny_data, tmp_path, straight_run, pause_at, capfd
):
    """A second `nmt train --out RUN` while the first trains (before its first checkpoint, when it
    looks like a killed start, and after) is refused, changes no file, and the first ends exactly as
    alone."""
    run, paused, go = tmp_path / "run", tmp_path / "paused", tmp_path / "go"

    def first() -> int:
        real = trainer_module.Trainer.train_step

        def train_step(self, micro, total_tokens):
            if self.progress.update == pause_at and not go.exists():
                paused.touch()
                deadline = time.time() + 120
                while not go.exists() and time.time() < deadline:
                    time.sleep(0.02)
            return real(self, micro, total_tokens)

        trainer_module.Trainer.train_step = train_step
        return train(tiny_data, run)

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = first()
        finally:
            os._exit(code)
    try:
        deadline = time.time() + 120
        while not paused.exists():
            assert time.time() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0), (
                "the first run did not start"
            )
            time.sleep(0.02)
        snapshot = {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in run.rglob("*")}
        capfd.readouterr()
        assert train(tiny_data, run) == 2
        assert resume(tiny_data, run, *RUN) == 2
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 2 and all(
            line.startswith(f"nmt train: error: {run} is in use by another `nmt train` (pid {pid} on host ")
            for line in err
        )
        assert f"lock file {run / 'train.lock'}" in err[0] and f"delete {run / 'train.lock'}" in err[0]
        assert {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in run.rglob("*")} == snapshot
    finally:
        go.touch()
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    assert status == 0
    assert_same_as_straight(run, straight_run)


# ----------------------------------------------------------------------------- kills while saving
def in_step_2(path) -> bool:
    return ".step_00000002.tmp-" in str(path)


PHASES = {
    # name: (what the child patches, the module attribute, when to SIGKILL)
    "validating step 2": (trainer_module.Trainer, "validate", lambda self: self.progress.update == 2),
    "writing step_2": (
        ckpt,
        "_save_tensors",
        lambda tensors, path, metadata=None: in_step_2(path) and path.name == "optimizer.safetensors",
    ),
    "step_2 written, not renamed": (ckpt, "replace_dir", lambda new, d: d.name == "step_00000002"),
    "step_2 renamed, not synced": (
        atomic,
        "fsync_dir",
        lambda p: p.name == "checkpoints" and (p / "step_00000002").exists(),
    ),
    "best copy complete, not in place": (
        ckpt,
        "replace_dir",
        lambda new, d: d.name == "best" and (d.parent / "step_00000002").exists(),
    ),
    "old best set aside, new one not renamed": (
        os,
        "rename",
        lambda src, dst: Path(dst).name == "best"
        and Path(src).name.startswith(".best.tmp-")
        and (Path(dst).parent / "step_00000002").exists(),
    ),
    "new best in place, old one not deleted": (
        shutil,
        "rmtree",
        lambda p, *a, **k: Path(p).name.startswith(".best.old-"),
    ),
    "deleting step_1": (
        shutil,
        "rmtree",
        lambda p, *a, **k: Path(p).name.startswith(".step_00000001.deleting"),
    ),
}


def copying_best() -> None:
    """SIGKILL after two files of step_2 were copied to best's temporary."""
    real = shutil.copytree

    def copytree(src, dst, **kwargs):
        if Path(src).name != "step_00000002" or not Path(dst).name.startswith(".best.tmp-"):
            return real(src, dst, **kwargs)
        copied = []

        def copy(s, d):
            if len(copied) == 2:
                sigkill()
            copied.append(s)
            return shutil.copy2(s, d)

        return real(src, dst, copy_function=copy, **kwargs)

    shutil.copytree = copytree


@pytest.mark.parametrize("phase", [*PHASES, "copying step_2 to best"])
def test_sigkill_at_every_phase_of_saving_and_replacing_best_loses_nothing(
    tiny_data, tmp_path, straight_run, phase
):
    """Killed at each phase of update 2's checkpoint, its copy to best and the deletion of step_1,
    the best model so far is always a complete checkpoint (a kill during the copy does not leave the
    old best for good), and `--resume auto` ends as the uninterrupted run."""
    run = tmp_path / "run"

    def body() -> int:
        if phase == "copying step_2 to best":
            copying_best()
        else:
            kill_when(*PHASES[phase])
        return train(tiny_data, run)

    assert forked(body) == -signal.SIGKILL
    best_is_recoverable(run)
    assert resume(tiny_data, run) == 0
    assert_same_as_straight(run, straight_run)


# ----------------------------------------------------------------------------- a damaged checkpoint
def test_resume_auto_falls_back_from_a_corrupt_latest_checkpoint(tiny_data, tmp_path, straight_run, capsys):
    """--resume auto with a damaged latest checkpoint warns, sets it aside and resumes from the
    newest one that verifies (not exit 2 on every relaunch)."""
    run = tmp_path / "run"
    assert train(tiny_data, run, "--train.keep_last=2") == 0
    bad = run / "checkpoints" / "step_00000002"
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # a truncated write on a failing disk
    capsys.readouterr()
    assert resume(tiny_data, run, "--train.keep_last=1") == 0
    err = capsys.readouterr().err
    assert (f"warning: {bad} is damaged ({weights}: size") in err
    assert (
        "set aside as corrupt-step_00000002" in err
        and f"resumed from {run / 'checkpoints' / 'step_00000001'}" in err
    )
    assert (run / "checkpoints" / "corrupt-step_00000002" / "model.safetensors").exists()  # kept to inspect
    shutil.rmtree(run / "checkpoints" / "corrupt-step_00000002")
    assert_same_as_straight(run, straight_run)


# ----------------------------------------------------------------------------- a full disk
def test_log_that_cannot_be_written_stops_with_a_checkpoint_and_loses_no_line(
    tiny_data, tmp_path, straight_run, capfd
):
    """A full disk while writing metrics.jsonl / train.log: with a real write error (RLIMIT_FSIZE: a
    metrics.jsonl already past the limit), the run stops at the update with one clear line and a
    checkpoint that holds the unwritten lines; the resumed run ends as the uninterrupted one, every
    metrics record included."""
    run = tmp_path / "run"
    step_1 = ckpt.list_step_checkpoints(straight_run)[-1]
    limit = max(f.stat().st_size for f in step_1.iterdir()) + 20_000  # every checkpoint file fits
    run.mkdir()
    padding = json.dumps({"split": "padding", "update": 0, "text": "x" * 1000}) + "\n"
    (run / "metrics.jsonl").write_text(padding * (limit // len(padding) + 1))

    def body() -> int:
        resource.setrlimit(
            resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY)
        )  # SIGXFSZ: ignored by Python
        return train(tiny_data, run)

    capfd.readouterr()
    assert forked(body) == 2
    last = capfd.readouterr().err.strip().splitlines()[-1]
    assert last == (
        f"nmt train: error: could not write {run / 'metrics.jsonl'}: File too large; checkpoint "
        f"{run / 'checkpoints' / 'step_00000001'} written (it holds the lines not written): free some "
        "space, then continue with --resume auto"
    )
    assert [p.name for p in ckpt.list_step_checkpoints(run)] == ["step_00000001"]
    assert state(run / "checkpoints" / "step_00000001")["validation_pending"] is True
    assert resume(tiny_data, run) == 0
    assert_same_as_straight(run, straight_run)


# ----------------------------------------------------------------------------- signals
@pytest.fixture
def ctrl_c():
    """SIGINT delivered as a terminal delivers it, whatever this process inherited: a suite started
    as a script's background job ignores SIGINT, and `nmt train` rightly keeps an ignored signal
    ignored (tests/test_distributed.py pins that)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 0), (signal.SIGINT, 130)])
def test_signal_during_validation_interrupts_it_and_resume_validates_first(
    tiny_data, tmp_path, straight_run, monkeypatch, capsys, signum, status, ctrl_c
):
    """SIGTERM or Ctrl-C during a long validation ends it at once (within a scheduler's grace
    period): checkpoint step_2 with its validation pending, one line; the resume validates it first
    and ends as the uninterrupted run (same best)."""
    run = tmp_path / "run"
    real = trainer_module.Trainer.validate
    calls = []

    def endless_validation(self):  # step 2's validation: the signal comes, then it goes on for a long time
        if self.progress.update != 2:
            return real(self)
        calls.append(self.progress.update)
        os.kill(os.getpid(), signum)
        deadline = time.time() + 20
        while time.time() < deadline:
            real(self)
        raise RuntimeError("the signal did not interrupt the validation")

    monkeypatch.setattr(trainer_module.Trainer, "validate", endless_validation)
    try:
        assert train(tiny_data, run) == status
    except KeyboardInterrupt:  # not caught by nmt: fail this test, not the whole session
        pytest.fail("Ctrl-C escaped `nmt train` as KeyboardInterrupt")
    err = capsys.readouterr().err
    name = signal.Signals(signum).name
    assert (
        calls == [2]
        and f"validation of step 2 interrupted ({name}): checkpoint written, its validation pending" in err
    )
    verb = "interrupted" if signum == signal.SIGINT else "preempted"
    assert f"{verb} at update 2 ({name}): checkpoint written; continue with --resume auto" in err
    assert state(run / "checkpoints" / "step_00000002")["validation_pending"] is True
    assert state(run / "checkpoints" / "best")["update"] == 1  # step 2 is not yet validated
    monkeypatch.setattr(trainer_module.Trainer, "validate", real)
    assert resume(tiny_data, run) == 0
    assert "validating step 2 (its validation was interrupted)" in capsys.readouterr().err
    assert_same_as_straight(run, straight_run)


def test_ctrl_c_between_updates_writes_a_checkpoint(
    tiny_data, tmp_path, straight_run, monkeypatch, capsys, ctrl_c
):
    """Ctrl-C between updates is no traceback: the update ends, checkpoint step_1 is written with
    step 1's validation pending, exit 130, and the resume ends as the uninterrupted run."""
    run = tmp_path / "run"
    real = trainer_module.Trainer.train_step

    def train_step(self, micro, total_tokens):
        if self.progress.update == 0:
            os.kill(os.getpid(), signal.SIGINT)  # during the first update
        return real(self, micro, total_tokens)

    monkeypatch.setattr(trainer_module.Trainer, "train_step", train_step)
    try:
        assert train(tiny_data, run) == 130
    except KeyboardInterrupt:  # not caught by nmt: fail this test, not the whole session
        pytest.fail("Ctrl-C escaped `nmt train` as KeyboardInterrupt")
    assert (
        "interrupted at update 1 (SIGINT): checkpoint written; continue with --resume auto"
        in capsys.readouterr().err
    )
    assert [p.name for p in ckpt.list_step_checkpoints(run)] == ["step_00000001"]
    assert state(run / "checkpoints" / "step_00000001")["validation_pending"] is True
    monkeypatch.setattr(trainer_module.Trainer, "train_step", real)
    assert resume(tiny_data, run) == 0
    assert_same_as_straight(run, straight_run)
