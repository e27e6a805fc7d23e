"""Choosing the compute precision: detect what the hardware runs fast, never assume it.

``auto`` picks bfloat16 autocast on CUDA devices that support bf16, and on CPUs that have AMX or
AVX512-BF16 (read from /proc/cpuinfo) where a bf16 matrix product also measures faster than a
float32 one (``bf16_speedup``, at least BF16_MARGIN times: a flag is no promise, e.g. a virtual
machine can show avx512_bf16 while its bf16 products run at half float32's speed); float32
everywhere else. Master weights and optimizer state always stay float32: autocast only changes
the dtype of matrix products.

The environment variable ``NMT_PRECISION`` (``fp32``, ``bf16`` or ``fp16``) overrides what ``auto``
picks, so that one machine takes another's path: ``NMT_PRECISION=fp32`` on a CPU with AVX512-BF16
behaves as ``auto`` does on an AVX2-only CPU (the forced pass of ``make test``). An explicit
``fp32``/``bf16``/``fp16`` is never overridden.
"""

from __future__ import annotations

import contextlib
import os
import time
from functools import lru_cache

import torch

PRECISIONS = ("fp32", "bf16", "fp16", "auto")
PRECISION_ENV = "NMT_PRECISION"  # what `auto` picks, forced (fp32, bf16 or fp16)


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


BF16_MARGIN = 1.2  # bf16 products must run this many times float32's speed for `auto` to pick bf16
SPEEDUP_SIZE = 1024  # the measured product: (n, n) x (n, n), large enough to be bound by arithmetic


@lru_cache(maxsize=1)
def bf16_speedup(n: int = SPEEDUP_SIZE, repeat: int = 3) -> float:
    """How many times faster this CPU multiplies two (n, n) bf16 matrices than float32 ones (the
    best of ``repeat`` timings each, after one untimed; once per process, about 0.1 s)."""

    def best(dtype: torch.dtype) -> float:
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        a @ b  # kernels chosen, memory touched
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        return min(times)

    with torch.inference_mode():
        return best(torch.float32) / best(torch.bfloat16)


def cpu_has_fast_bf16() -> tuple[bool, str]:
    """Whether bf16 matrix products are fast on this CPU (AMX or AVX512-BF16, and measured faster
    than float32 by BF16_MARGIN), and why."""
    flags = cpu_flags()
    fast = sorted(flags & {"amx_bf16", "avx512_bf16"})
    if not fast:
        capability = torch.backends.cpu.get_cpu_capability()
        return False, f"CPU has no AMX/AVX512-BF16 (torch capability {capability}): bf16 would be emulated"
    speedup = bf16_speedup()
    if speedup < BF16_MARGIN:
        return False, (
            f"CPU has {', '.join(fast)}, but its bf16 products measured {speedup:.2f}x float32's "
            f"speed (under {BF16_MARGIN}x): float32 is faster here"
        )
    return True, f"CPU has {', '.join(fast)}; bf16 products measured {speedup:.2f}x float32's speed"


def auto_dtype(device: torch.device | str) -> tuple[torch.dtype | None, str]:
    """The autocast dtype ``auto`` picks for ``device`` (None = float32) and why; $NMT_PRECISION,
    where set, is the pick."""
    device = torch.device(device)
    forced = os.environ.get(PRECISION_ENV, "")
    if forced:
        if forced not in PRECISIONS[:-1]:
            raise ValueError(f"{PRECISION_ENV}={forced!r}: choose from {PRECISIONS[:-1]} (or unset it)")
        return resolve_precision(forced, device)[0], f"{PRECISION_ENV}={forced} in the environment"
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16, f"{torch.cuda.get_device_name(device)} supports bf16"
        return None, f"{torch.cuda.get_device_name(device)} lacks bf16"
    if device.type == "cpu":
        fast, why = cpu_has_fast_bf16()
        return (torch.bfloat16 if fast else None), why
    return None, f"no fast reduced precision known for {device.type}"


def resolve_precision(precision: str, device: torch.device | str) -> tuple[torch.dtype | None, str]:
    """Map ``fp32|bf16|fp16|auto`` to an autocast dtype (None = float32) and a description."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: choose from {PRECISIONS}")
    if precision == "fp32":
        return None, "fp32 (requested)"
    if precision == "bf16":
        return torch.bfloat16, "bf16 autocast (requested)"
    if precision == "fp16":
        if torch.device(device).type != "cuda":
            raise ValueError("precision='fp16' needs a CUDA device (use bf16 or fp32 on CPU)")
        return torch.float16, "fp16 autocast with loss scaling (requested)"
    dtype, why = auto_dtype(device)
    return dtype, f"{'bf16 autocast' if dtype else 'fp32'} (auto: {why})"


def autocast(device: torch.device | str, dtype: torch.dtype | None):
    """A context manager: autocast to ``dtype`` on ``device``, or nothing for float32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=dtype)
