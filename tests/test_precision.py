"""nmt.precision: what `auto` picks, and NMT_PRECISION, which forces that pick (another CPU's path)."""

import pytest
import torch

import nmt.precision
from nmt.precision import resolve_precision


@pytest.mark.parametrize("forced, want", [("fp32", None), ("bf16", torch.bfloat16)])
def test_nmt_precision_forces_what_auto_picks_and_nothing_else(monkeypatch, forced, want):
    """NMT_PRECISION decides `auto` whatever the CPU reports, and says so; fp32/bf16 asked for by
    name stay what they are."""
    for flags in ({"avx2"}, {"avx512_bf16"}):
        monkeypatch.setattr(nmt.precision, "cpu_flags", lambda flags=frozenset(flags): flags)
        monkeypatch.setenv("NMT_PRECISION", forced)
        dtype, note = resolve_precision("auto", "cpu")
        assert dtype is want and f"NMT_PRECISION={forced} in the environment" in note
        assert resolve_precision("fp32", "cpu")[0] is None
        assert resolve_precision("bf16", "cpu")[0] is torch.bfloat16
        monkeypatch.delenv("NMT_PRECISION")
        assert resolve_precision("auto", "cpu")[0] is (torch.bfloat16 if "avx512_bf16" in flags else None)


def test_nmt_precision_refuses_what_it_cannot_force(monkeypatch):
    """A value that is no precision, or fp16 on a CPU, is an error naming the variable."""
    monkeypatch.setenv("NMT_PRECISION", "fp8")
    with pytest.raises(ValueError, match="NMT_PRECISION='fp8'"):
        resolve_precision("auto", "cpu")
    monkeypatch.setenv("NMT_PRECISION", "fp16")
    with pytest.raises(ValueError, match="fp16"):
        resolve_precision("auto", "cpu")
