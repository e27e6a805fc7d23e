"""The run directory of `nmt train --out RUN`: one owner at a time (a lock file naming its host and
pid), room for its checkpoints, its config.json written whole, the step checkpoints past keep_last
deleted, and what a crash leaves to mend (metrics written after the last checkpoint, a copy to
``best`` that a kill cut short).

The lock is ``RUN/train.lock``, held with ``flock`` for the life of the run: the kernel (or the NFS
lock manager) releases it when its owner dies, however it dies, so a killed run never blocks the next
one. The file names the owner (host, pid, start time) for the message a refused start prints. Where
the file system has no locks, a lock file naming a live process on this host, or any process on
another host, refuses the start; one naming a dead process on this host is taken over.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import time
from pathlib import Path

from .. import checkpoint as ckpt
from ..atomic import write_text
from .state import saved_update

LOCK = "train.lock"


class RunDirError(Exception):
    """The run directory cannot be used as asked; the message says why and what to do."""


# ----------------------------------------------------------------------------- one owner
class RunLock:
    """``RUN/train.lock``, held from `acquire` to `release` (or the owner's death)."""

    def __init__(self, path: Path, file):
        self.path, self._file = path, file

    @classmethod
    def acquire(cls, run_dir: Path) -> "RunLock":
        """Own ``run_dir`` or raise RunDirError naming the owner; a refused start changes nothing."""
        path = run_dir / LOCK
        run_dir.mkdir(parents=True, exist_ok=True)
        while True:
            f = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+")  # never truncated here
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _owner(f)
                f.close()
                raise RunDirError(_in_use(run_dir, path, owner)) from None
            except OSError:  # no locks on this file system (ENOLCK, EOPNOTSUPP): judge by the owner's pid
                owner = _owner(f)
                if owner and _may_run(owner):
                    f.close()
                    raise RunDirError(_in_use(run_dir, path, owner)) from None
            try:  # a releasing owner unlinks the file: the one locked must still be the one at `path`
                same = os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            f.close()
        f.seek(0)
        f.truncate()
        f.write(
            json.dumps(
                {
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                }
            )
            + "\n"
        )
        f.flush()
        os.fsync(f.fileno())
        return cls(path, f)

    def release(self) -> None:
        """Delete the lock file (while still holding it), then let go."""
        if self._file is None:
            return
        try:
            if os.fstat(self._file.fileno()).st_ino == os.stat(self.path).st_ino:
                os.unlink(self.path)
        except OSError:
            pass
        self._file.close()
        self._file = None


def _owner(f) -> dict:
    try:
        f.seek(0)
        owner = json.loads(f.read() or "{}")
        return owner if isinstance(owner, dict) else {}
    except (OSError, ValueError):
        return {}


def _may_run(owner: dict) -> bool:
    """Whether the lock file's owner may still run: any process on another host; on this host,
    a live pid."""
    if owner.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(owner.get("pid", 0)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True
    return True


def _in_use(run_dir: Path, path: Path, owner: dict) -> str:
    who = (
        f"pid {owner['pid']} on host {owner.get('host', '?')} since {owner.get('started', '?')}"
        if "pid" in owner
        else "a process that has not yet written its name"
    )
    return (
        f"{run_dir} is in use by another `nmt train` ({who}; lock file {path}): wait for it to end, "
        f"stop it, or choose another --out; if that process no longer runs (its machine went down), "
        f"the lock is stale: delete {path} and start again"
    )


# ----------------------------------------------------------------------------- room for checkpoints
def check_free_space(run_dir: Path, *, checkpoint_bytes: int, keep_last: int) -> None:
    """keep_last step checkpoints, best and one being written must fit. The run's own checkpoints
    (a resumed run) count as room: they are replaced, not added to."""
    need = checkpoint_bytes * (keep_last + 2)
    folder = run_dir / "checkpoints"
    held = sum(
        f.stat().st_size
        for d in [*ckpt.list_step_checkpoints(run_dir), folder / "best"]
        if d.is_dir()
        for f in d.iterdir()
        if f.is_file()
    )
    free = shutil.disk_usage(run_dir).free
    if free + held < need:
        raise RunDirError(
            f"{run_dir}: only {free / 1e6:.0f} MB free; keep_last={keep_last} checkpoints of "
            f"about {checkpoint_bytes / 1e6:.0f} MB, best and one being written need about "
            f"{need / 1e6:.0f} MB{f' ({held / 1e6:.0f} MB of them held already)' if held else ''} "
            "(lower --train.keep_last or free some space)"
        )


def write_config(path: Path, config: dict) -> None:
    """Write the run's ``config.json`` whole or not at all."""
    try:
        write_text(path, json.dumps(config, indent=2) + "\n")
    except OSError as e:
        raise RunDirError(
            f"could not write {path}: {e.strerror or e} (free some space, then start again)"
        ) from None


def rotate_checkpoints(run_dir: Path, *, keep_last: int) -> None:
    """Delete the step checkpoints older than the newest ``keep_last``."""
    for old in ckpt.list_step_checkpoints(run_dir)[:-keep_last]:
        ckpt.remove_checkpoint(old)


# ----------------------------------------------------------------------------- mending after a crash
def trim_metrics(path: Path, update: int) -> None:
    """Drop the records of ``path`` (metrics.jsonl) past ``update`` (a killed run wrote them after
    its last checkpoint; they will be written again) and a last line cut by the kill (no newline,
    or not JSON). The file is rewritten atomically, and only if something is dropped."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = []
    for line in lines:
        try:
            if line.endswith("\n") and saved_update({"step": 0, **json.loads(line)}) <= update:
                kept.append(line)
        except (json.JSONDecodeError, TypeError, ValueError):  # a line cut by the kill
            pass
    if kept != lines:
        try:
            write_text(path, "".join(kept))
        except OSError as e:
            raise RunDirError(
                f"{path}: cannot rewrite it ({e.strerror or e}): free some space, then start again"
            ) from None


def write_unwritten(run_dir: Path, unwritten: dict[str, list[str]]) -> None:
    """Append the lines a full disk kept from the run's logs ({file name: lines}), after a newline
    if the failed write cut the file's last line; lines already there (a resume from the same
    checkpoint before) are not written twice. An OSError names the file."""
    for name, lines in sorted(unwritten.items()):
        path = run_dir / name
        try:
            text = path.read_text() if path.exists() else ""
            there = set(text.splitlines(keepends=True))
            with open(path, "a") as f:
                f.write(
                    ("\n" if text and not text.endswith("\n") else "")
                    + "".join(line for line in lines if line not in there)
                )
        except OSError as e:
            raise OSError(e.errno, e.strerror, str(path)) from None


def set_aside(directory: Path) -> Path:
    """Rename a damaged checkpoint to ``corrupt-NAME`` (``corrupt-NAME.K`` if taken): kept to inspect,
    no longer listed as a checkpoint."""
    aside = directory.with_name(f"corrupt-{directory.name}")
    k = 0
    while aside.exists():
        k += 1
        aside = directory.with_name(f"corrupt-{directory.name}.{k}")
    os.rename(directory, aside)
    return aside


def checkpoint_step(directory: Path) -> int | None:
    """The update of a checkpoint (its trainer_state.json), None if it is missing or unreadable."""
    try:
        return saved_update(ckpt.read_json(directory / "trainer_state.json"))
    except (ckpt.CheckpointError, KeyError, TypeError, ValueError):
        return None


def mend_best(run_dir: Path, best_step: int | None) -> str | None:
    """Make ``best`` hold the checkpoint of ``best_step`` (the trainer state's best) when a kill cut
    its copy short, leaving the previous best (or none): copy ``step_{best_step}`` again. A ``best``
    from a later step (a resume fell back to an older checkpoint) is kept. Returns what it did."""
    if not best_step:
        return None
    folder = run_dir / "checkpoints"
    held = checkpoint_step(folder / "best")
    if held is not None and held >= best_step:
        return None
    source = folder / f"step_{best_step:08d}"
    try:
        ckpt.verify(source)
    except ckpt.CheckpointError:
        return None  # nothing better to copy: keep what best holds
    ckpt.copy_checkpoint(source, folder / "best")
    return (
        f"{folder / 'best'} held {f'step {held}' if held is not None else 'no checkpoint'}, the run's "
        f"best is step {best_step} (a copy cut short by a kill): copied {source.name} to best again"
    )
