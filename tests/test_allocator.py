"""nmt/allocator.py: freed memory kept in the process (glibc's mmap and trim thresholds), numerically
neutral, and a user's own malloc settings left alone."""

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def test_keep_freed_memory_is_numerically_neutral():
    """nmt.allocator only changes where glibc gets memory: a step gives the same numbers after it,
    and those numbers are log-softmax's (x - logsumexp(x), by hand in float64)."""
    from nmt.allocator import keep_freed_memory

    torch.manual_seed(0)
    x = torch.randn(300, 7000)
    before = torch.log_softmax(x, -1).sum()
    first = keep_freed_memory()
    assert keep_freed_memory() is first  # idempotent: the first call's answer, not a second mallopt
    after = torch.log_softmax(x, -1)
    assert torch.equal(after.sum(), before)
    xd = x.double()
    m = xd.max(-1, keepdim=True).values  # (300, 1)
    by_hand = xd - m - (xd - m).exp().sum(-1, keepdim=True).log()  # (300, 7000)
    torch.testing.assert_close(after.double(), by_hand, rtol=0, atol=2e-6)


# A fresh process (the thresholds are process-wide, set once): glibc's mallinfo2 counts the
# mmapped chunks (hblks) and the heap obtained from the system (arena). 64 MiB is above glibc's
# largest default mmap threshold (32 MiB), below nmt.allocator's 1 GiB.
MALLOC_PROBE = """
import ctypes, ctypes.util, json
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def probe():
    before = libc.mallinfo2()
    p = libc.malloc(64 << 20)
    during = libc.mallinfo2()
    libc.free(p)
    return {"mmapped": during.hblks - before.hblks, "heap_after_free": libc.mallinfo2().arena}
from nmt.allocator import keep_freed_memory
out = {"default": probe(), "first": keep_freed_memory(), "second": keep_freed_memory()}
out["after"] = probe()
print(json.dumps(out))
"""


def run_malloc_probe(**env) -> dict:
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
    except (OSError, AttributeError):
        pytest.skip("not glibc >= 2.33 (no mallinfo2): keep_freed_memory is a no-op there")
    repo = Path(__file__).resolve().parents[1]
    ours = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
    clean = {k: v for k, v in os.environ.items() if k not in ours}
    proc = subprocess.run(
        [sys.executable, "-c", MALLOC_PROBE],
        capture_output=True,
        text=True,
        check=True,
        env={**clean, "PYTHONPATH": str(repo), **env},
    )
    return json.loads(proc.stdout)


def test_keep_freed_memory_serves_large_blocks_from_the_heap_and_keeps_it():
    """Before: a 64 MiB block is its own mmap, unmapped on free. After keep_freed_memory() (True,
    and True again): it comes from the heap, and freeing it leaves the heap at >= 64 MiB (no trim)."""
    out = run_malloc_probe()
    assert out["default"]["mmapped"] == 1 and out["default"]["heap_after_free"] < 64 << 20
    assert out["first"] is True and out["second"] is True
    assert out["after"]["mmapped"] == 0 and out["after"]["heap_after_free"] >= 64 << 20


@pytest.mark.parametrize("variable", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_keep_freed_memory_leaves_a_users_malloc_settings_alone(variable):
    """With glibc's own variable set, keep_freed_memory() returns False and changes nothing."""
    out = run_malloc_probe(**{variable: str(16 << 20)})
    assert out["first"] is False and out["second"] is False
    assert out["after"]["mmapped"] == out["default"]["mmapped"] == 1
