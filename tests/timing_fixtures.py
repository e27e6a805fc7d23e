"""Linear time, tested: CPU time of a function at two sizes (the worst cases of the real-text
scanners: tests/test_markup.py, test_document.py, test_segment.py, test_casing.py)."""

from __future__ import annotations

import time


def cpu_seconds(fn, *args) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def assert_linear(fn, make, n: int) -> None:
    """fn(make(n)) takes at most 4 times what linear growth from n / 16 predicts, plus 0.5 s.
    Derived, not tuned: linear time is 16 times the small case (n log n about 20 times), quadratic
    256 times, so the bound (64 times) leaves a 4-fold margin for noise (CPU time, the best of 3
    small runs) and fails quadratic time whenever the small case takes over 2.6 ms."""
    small = min(cpu_seconds(fn, make(n // 16)) for _ in range(3))
    big = cpu_seconds(fn, make(n))
    assert big <= 64 * small + 0.5, (n, small, big)
