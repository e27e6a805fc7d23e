"""Progress of long work on stderr: a tqdm bar where the stream is a terminal; elsewhere (a log file,
a pipe) a plain line now and then, since a bar redraws itself with carriage returns that a file keeps
as one endless line of frames.

    bar = progress(total=n, unit="sent", desc="translate")
    bar.update(k); bar.set_postfix_str("chunk 2/9"); bar.close()
"""

from __future__ import annotations

import sys
import time
from typing import IO

PLAIN_EVERY_S = 30.0  # seconds between two plain progress lines


def is_terminal(stream: IO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


def progress(
    *,
    total: float | None,
    unit: str,
    desc: str = "",
    initial: float = 0,
    disable: bool = False,
    file: IO | None = None,
    leave: bool = True,
):
    """A tqdm bar on ``file`` (default stderr) if it is a terminal, else a ``PlainProgress`` with the
    methods of tqdm that nmt uses (update, set_postfix, set_postfix_str, close, n, a context)."""
    file = sys.stderr if file is None else file
    if is_terminal(file) or disable:
        from tqdm import tqdm

        return tqdm(
            total=total,
            initial=initial,
            unit=unit,
            desc=desc or None,
            disable=disable,
            file=file,
            leave=leave,
            dynamic_ncols=True,
            unit_scale=unit == "B",
        )
    return PlainProgress(total=total, unit=unit, desc=desc, initial=initial, file=file)


class PlainProgress:
    """Progress as whole lines: ``desc: n/total unit (p%), t s[, postfix]`` at most every
    ``every`` seconds as updates come, and once at close if anything moved since the last line."""

    def __init__(
        self,
        *,
        total: float | None,
        unit: str,
        desc: str = "",
        initial: float = 0,
        file: IO,
        every: float = PLAIN_EVERY_S,
        clock=time.monotonic,
    ):
        self.total, self.unit, self.desc, self.n, self.file = total, unit, desc, initial, file
        self.every, self.clock = every, clock
        self.start = self.last = clock()
        self.printed_n, self.postfix, self.closed = initial, "", False

    def update(self, n: float = 1) -> None:
        self.n += n
        if self.clock() - self.last >= self.every:
            self._line()

    def set_postfix(self, **values) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def close(self) -> None:
        if not self.closed and self.n != self.printed_n:
            self._line()
        self.closed = True

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _line(self) -> None:
        self.last = self.clock()
        self.printed_n = self.n
        done = f"{self.n:,.0f}" + (f"/{self.total:,.0f}" if self.total else "")
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        extra = f", {self.postfix}" if self.postfix else ""
        head = f"{self.desc}: " if self.desc else ""
        print(
            f"{head}{done} {self.unit}{share}, {self.last - self.start:.0f} s{extra}",
            file=self.file,
            flush=True,
        )
