"""Keep freed memory in the process instead of handing it back to the kernel after every step.

glibc's malloc serves allocations above its mmap threshold (at most 32 MiB, adjusted dynamically)
with fresh ``mmap`` pages and unmaps them on free. A training step on CPU allocates tensors larger
than that every step (the (tokens, vocabulary) logits and their gradient: 65 MB for 2k tokens and
an 8k vocabulary), so each one is faulted in and zeroed page by page, again and again: on the
2-core AVX2 machine of this project that was ~20% of a step of the small model
(benchmarks/train_speed.py). Raising the mmap and trim thresholds makes glibc reuse the freed
heap instead. The resident memory of a run then stays at its peak, which training reaches anyway.

Nothing changes numerically. A no-op on a C library other than glibc, and when the user has set
``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` (glibc's own variables) themselves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30  # 1 GiB: larger single tensors still use mmap

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; True when they are in effect."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return _done
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS, Windows)
        return _done
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, _THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, 2 * _THRESHOLD))
    return _done
