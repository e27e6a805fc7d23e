"""nmt.precision: what `auto` picks, and NMT_PRECISION, which forces that pick (another CPU's path)."""

import os

import pytest
import torch

import nmt.precision
from nmt.precision import resolve_precision


@pytest.mark.parametrize("forced, want", [("fp32", None), ("bf16", torch.bfloat16)])
def test_nmt_precision_forces_what_auto_picks_and_nothing_else(monkeypatch, forced, want):
    """NMT_PRECISION decides `auto` whatever the CPU reports, and says so; fp32/bf16 asked for by
    name stay what they are."""
    monkeypatch.setattr(nmt.precision, "bf16_speedup", lambda: 2.0)  # as on a CPU where bf16 pays
    for flags in ({"avx2"}, {"avx512_bf16"}):
        monkeypatch.setattr(nmt.precision, "cpu_flags", lambda flags=frozenset(flags): flags)
        monkeypatch.setenv("NMT_PRECISION", forced)
        dtype, note = resolve_precision("auto", "cpu")
        assert dtype is want and f"NMT_PRECISION={forced} in the environment" in note
        assert resolve_precision("fp32", "cpu")[0] is None
        assert resolve_precision("bf16", "cpu")[0] is torch.bfloat16
        monkeypatch.delenv("NMT_PRECISION")
        assert resolve_precision("auto", "cpu")[0] is (torch.bfloat16 if "avx512_bf16" in flags else None)


@pytest.mark.parametrize(
    "speedup, want", [(0.54, None), (1.19, None), (1.2, torch.bfloat16), (2.3, torch.bfloat16)]
)
def test_auto_picks_bf16_only_where_its_products_measure_faster_than_float32(monkeypatch, speedup, want):
    """A CPU that shows avx512_bf16 (or AMX) gets bf16 from `auto` only when its bf16 products
    measure at least BF16_MARGIN times float32's speed; otherwise float32, and the reason names the
    measured speed-up (a Xeon that shows avx512_bf16 ran them at 0.54x)."""
    monkeypatch.delenv("NMT_PRECISION", raising=False)
    monkeypatch.setattr(nmt.precision, "cpu_flags", lambda: frozenset({"avx512f", "avx512_bf16"}))
    monkeypatch.setattr(nmt.precision, "bf16_speedup", lambda: speedup)
    dtype, note = resolve_precision("auto", "cpu")
    assert dtype is want
    assert f"measured {speedup:.2f}x float32's" in note
    monkeypatch.setattr(nmt.precision, "cpu_flags", lambda: frozenset({"avx2"}))
    assert resolve_precision("auto", "cpu")[0] is None  # no flag: not measured, float32


def test_bf16_speedup_is_the_ratio_of_the_two_products_timings():
    """The measurement itself: a positive finite ratio, the same on a second call (once per process)."""
    import math

    first = nmt.precision.bf16_speedup()
    assert math.isfinite(first) and first > 0
    assert nmt.precision.bf16_speedup() == first


def test_nmt_precision_refuses_what_it_cannot_force(monkeypatch):
    """A value that is no precision, or fp16 on a CPU, is an error naming the variable."""
    monkeypatch.setenv("NMT_PRECISION", "fp8")
    with pytest.raises(ValueError, match="NMT_PRECISION='fp8'"):
        resolve_precision("auto", "cpu")
    monkeypatch.setenv("NMT_PRECISION", "fp16")
    with pytest.raises(ValueError, match="fp16"):
        resolve_precision("auto", "cpu")


def test_a_forced_cpu_path_is_read_back_from_each_library_and_one_not_taken_is_named():
    """cpu_path_fixtures (conftest stops a forced run whose path was not taken): the AVX2-only
    path with bf16 forced is read back from torch, oneDNN, CTranslate2 and `auto` in a fresh
    process; a value a library ignores (torch: an unknown capability) or a path another took is
    one line naming the variable; oneDNN's name of a value it was held to is compared exactly."""
    from cpu_path_fixtures import Observed, not_taken, observe_each

    forced = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "NMT_PRECISION": "bf16"}
    forced["CT2_FORCE_CPU_ISA"] = "AVX2"
    seen, ignored = observe_each(
        {**os.environ, **forced}, {**os.environ, "ATEN_CPU_CAPABILITY": "no-such-capability"}
    )
    assert (seen.torch_capability, seen.onednn_isa, seen.auto) == ("AVX2", "Intel AVX2", "bf16")
    assert seen.ct2_isa in ("AVX2", None)  # None: ctranslate2 not installed
    assert not_taken(forced, seen) == []
    assert not_taken({"ATEN_CPU_CAPABILITY": "no-such-capability"}, ignored) == [
        f"ATEN_CPU_CAPABILITY=no-such-capability: torch runs {ignored.torch_capability}"
    ]
    bf16_isa = "Intel AVX-512 with Intel DL Boost and bfloat16 support"
    other = Observed("AVX512", bf16_isa, "AVX512", "fp32")
    assert not_taken(forced, other) == [
        "ATEN_CPU_CAPABILITY=avx2: torch runs AVX512",
        f"ONEDNN_MAX_CPU_ISA=AVX2: oneDNN runs {bf16_isa}; not taken",
        "CT2_FORCE_CPU_ISA=AVX2: CTranslate2 selected AVX512",
        "NMT_PRECISION=bf16: `auto` picks fp32",
    ]
    assert (
        "cannot be checked" in not_taken({"ONEDNN_MAX_CPU_ISA": "AVX512"}, other)[0]
    )  # oneDNN's is AVX512_CORE
