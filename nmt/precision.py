"""Choosing the compute precision: detect what the hardware runs fast, never assume it.

``auto`` picks bfloat16 autocast on CUDA devices that support bf16, and on CPUs that have AMX or
AVX512-BF16 (read from /proc/cpuinfo); float32 everywhere else. Master weights and optimizer state
always stay float32: autocast only changes the dtype of matrix products.

The environment variable ``NMT_PRECISION`` (``fp32``, ``bf16`` or ``fp16``) overrides what ``auto``
picks, so that one machine takes another's path: ``NMT_PRECISION=fp32`` on a CPU with AVX512-BF16
behaves as ``auto`` does on an AVX2-only CPU (the forced pass of ``make test``). An explicit
``fp32``/``bf16``/``fp16`` is never overridden.
"""

from __future__ import annotations

import contextlib
import os
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


def cpu_has_fast_bf16() -> tuple[bool, str]:
    flags = cpu_flags()
    fast = sorted(flags & {"amx_bf16", "avx512_bf16"})
    if fast:
        return True, f"CPU has {', '.join(fast)}"
    capability = torch.backends.cpu.get_cpu_capability()
    return False, f"CPU has no AMX/AVX512-BF16 (torch capability {capability}): bf16 would be emulated"


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
