"""What a training run tells as it goes: ``train.log`` lines (also on stderr), ``metrics.jsonl`` records
and tensorboard scalars, written by rank 0; the train loss of the updates since the last log line; the
progress bar.

A log that cannot be written (a full disk) does not stop the run at once: from the first failed write
on, no log file is written again, the lines are kept (`RunLog.unwritten`) for the next checkpoint
(``trainer_state.json``: ``unwritten_log``), the loop stops at the next update with that checkpoint, and
the resumed run appends them (`RunLog.write_back`)."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from pathlib import Path

from .run_dir import write_unwritten


class RunLog:
    """``RUN/train.log`` and ``RUN/metrics.jsonl``, and the tensorboard scalars once
    `open_tensorboard` ran; ``enabled``: this process writes them (rank 0)."""

    def __init__(self, run_dir: Path, *, enabled: bool):
        self.run_dir, self.enabled = run_dir, enabled
        self.error: str | None = None  # the first failed write to train.log / metrics.jsonl
        self.unwritten: dict[str, list[str]] = {}  # log lines not written since (kept in the checkpoint)
        self.tb = None

    def log(self, message: str) -> None:
        """A line on stderr and, after the time, in train.log."""
        if self.enabled:
            print(message, file=sys.stderr, flush=True)
            self._append("train.log", f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")

    def metric(self, record: dict) -> None:
        """A record of metrics.jsonl; its numbers also as tensorboard scalars ``SPLIT/NAME``."""
        if self.enabled:
            self._append("metrics.jsonl", json.dumps(record) + "\n")
            if self.tb is not None:
                for k, v in record.items():
                    if isinstance(v, (int, float)) and k != "update":
                        self.tb.add_scalar(f"{record.get('split', 'train')}/{k}", v, record["update"])

    def _append(self, name: str, line: str) -> None:
        """Append a line to a log of the run. Once a write fails (a full disk), no file is written
        again: the lines are kept for the next checkpoint, which a resume appends them from, and the
        loop stops at the next update with that checkpoint."""
        if self.error is None:
            try:
                with open(self.run_dir / name, "a") as f:
                    f.write(line)
                return
            except OSError as e:
                self.error = f"could not write {self.run_dir / name}: {e.strerror or e}"
        self.unwritten.setdefault(name, []).append(line)

    def write_back(self) -> None:
        """Append the log lines a full disk kept from the files (the checkpoint held them)."""
        try:
            write_unwritten(self.run_dir, self.unwritten)
            self.unwritten = {}
        except OSError as e:
            self.error = f"could not write {e.filename}: {e.strerror or e}"

    def open_tensorboard(self) -> None:
        """``RUN/tensorboard`` (rank 0), if tensorboard is installed; metrics.jsonl is enough."""
        if self.enabled:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            except Exception:  # tensorboard not installed: metrics.jsonl is enough
                self.tb = None

    def close(self) -> None:
        if self.tb is not None:
            with contextlib.suppress(Exception):  # a full disk: the error said so already
                self.tb.close()
            self.tb = None


class LossWindow:
    """The updates since the last log line: their train loss and nll weighted by their target tokens,
    and their target tokens per second."""

    def __init__(self):
        self._restart()

    def _restart(self) -> None:
        self.tokens, self.start = 0, time.time()
        self.loss = self.nll = 0.0  # token-weighted sums

    def add(self, stats: dict) -> None:
        """An update's ``train_step`` statistics (means per target token, and its target tokens)."""
        self.tokens += stats["tokens"]
        self.loss += stats["loss"] * stats["tokens"]
        self.nll += stats["nll"] * stats["tokens"]

    def take(self) -> tuple[float, float, float]:
        """(loss, nll, target tokens per second) of the window, which then starts again."""
        rate = self.tokens / max(time.time() - self.start, 1e-9)
        loss, nll = self.loss / self.tokens, self.nll / self.tokens
        self._restart()
        return loss, nll, rate

    def record(self, stats: dict, *, update: int, epoch: int, elapsed: float) -> dict:
        """The train record (metrics.jsonl) of update ``update`` (``stats``: its `train_step`
        statistics): loss, nll and rate over the window, which then starts again."""
        loss, nll, rate = self.take()
        return {
            "split": "train",
            "update": update,
            "epoch": epoch,
            "loss": loss,
            "nll": nll,
            "ppl": math.exp(min(nll, 50)),
            "lr": stats["lr"],
            "grad_norm": stats["grad_norm"],
            "tgt_tokens_per_s": rate,
            "elapsed": elapsed,
        }


def progress_bar(*, max_steps: int, max_time: float, update: int, elapsed: float):
    """A tqdm bar of training seconds when the time limit binds (its ETA then counts them), else of
    updates (of max_steps, if set). nmt.progress: plain lines where stderr is no terminal."""
    from ..progress import progress

    if max_time:
        return progress(total=round(max_time * 60), initial=round(elapsed), unit="s", desc="train")
    return progress(total=max_steps or None, initial=update, unit="update", desc="train")


class TrainBar:
    """The training run's `progress_bar` (none unless ``enabled``): moved on after every update, its
    postfix the latest train record's update, loss, learning rate and rate."""

    def __init__(self, *, enabled: bool, max_steps: int, max_time: float, update: int, elapsed: float):
        self.max_time = max_time
        self.bar = (
            progress_bar(max_steps=max_steps, max_time=max_time, update=update, elapsed=elapsed)
            if enabled
            else None
        )

    def advance(self, record: dict | None, *, elapsed: float) -> None:
        """After an update (``record``: its train record, if it has one; ``elapsed``: training seconds)."""
        if self.bar is None:
            return
        if record is not None:
            self.bar.set_postfix(
                update=record["update"],
                loss=f"{record['loss']:.3f}",
                lr=f"{record['lr']:.2e}",
                tok_s=f"{record['tgt_tokens_per_s']:.0f}",
            )
        self.bar.update(round(elapsed) - self.bar.n if self.max_time else 1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
