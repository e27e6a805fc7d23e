"""The int8 layer of `--precision int8` (nmt.infer.int8_linear): torch.ao's int8 weights kept,
fbgemm's product at few rows and oneDNN's at many, activations over 8 bits only where the CPU
cannot saturate."""

import warnings

import pytest
import torch
from torch import nn

from nmt.infer import int8_linear
from nmt.infer.int8_linear import NEVER, Int8Linear, full_range, many_from, swap_into

pytestmark = [
    pytest.mark.numerics,
    pytest.mark.skipif(
        "fbgemm" not in torch.backends.quantized.supported_engines,
        reason="this torch has no fbgemm int8 engine",
    ),
]
ONEDNN = "onednn" in torch.backends.quantized.supported_engines


def dynamic(linear: nn.Linear) -> nn.Module:
    """torch.ao's dynamic int8 copy of ``linear`` (per-row weights, as nmt.infer.quantize)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.ao.quantization.quantize_dynamic(
            nn.Sequential(linear),
            {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig},
            dtype=torch.qint8,
        )
    return model[0]


def int8_weight(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scales = torch.rand(out_features, generator=g, dtype=torch.double) * 0.01 + 0.001
    w = torch.randn(out_features, in_features, generator=g)
    return torch.quantize_per_channel(
        w * 0.02, scales, torch.zeros(out_features, dtype=torch.long), 0, torch.qint8
    )


@torch.no_grad()
def test_a_swapped_layer_keeps_torch_ao_s_int8_weights_and_at_seven_bits_its_outputs():
    torch.manual_seed(0)
    linear = nn.Linear(64, 48)
    reference = dynamic(linear)
    model = swap_into(nn.Sequential(dynamic(linear)))
    layer = model[0]
    assert isinstance(layer, Int8Linear) and layer.reduce_range == (not full_range())
    w_ref, b_ref = reference._weight_bias()
    w, b = layer._weight_bias()
    assert torch.equal(w.int_repr(), w_ref.int_repr()) and torch.equal(b, b_ref)
    assert torch.equal(w.q_per_channel_scales(), w_ref.q_per_channel_scales())
    layer.reduce_range = True  # torch.ao's own range: its outputs, at few rows (fbgemm in both)
    x = torch.randn(5, 64)
    torch.testing.assert_close(layer(x), reference(x), rtol=0, atol=1e-6)


@torch.no_grad()
@pytest.mark.skipif(not ONEDNN, reason="this torch has no oneDNN int8 engine")
def test_a_layer_multiplies_rows_from_many_from_on_through_its_second_kernel(monkeypatch):
    monkeypatch.setenv(int8_linear.KERNEL_ENV, "onednn")
    weight, other = int8_weight(32, 16, seed=1), int8_weight(32, 16, seed=2)
    layer = Int8Linear(weight, None, reduce_range=True)
    layer.many = Int8Linear(other, None, reduce_range=True).few  # tell the kernels apart by their weights
    layer.many_from = 8
    x = torch.randn(8, 16)
    expected_few = Int8Linear(weight, None, reduce_range=True).few
    expected_many = layer.many
    few = torch.ops.quantized.linear_dynamic(x[:7], expected_few, True)
    many = torch.ops.quantized.linear_dynamic(x, expected_many, True)
    assert torch.equal(layer(x[:7]), few)  # 7 rows: the first kernel
    assert torch.equal(layer(x), many)  # 8 rows: the second
    assert layer(x.view(2, 4, 16)).shape == (2, 4, 32)  # rows are every position of the input


@torch.no_grad()
@pytest.mark.skipif(not ONEDNN, reason="this torch has no oneDNN int8 engine")
@pytest.mark.parametrize("reduce_range", [True, False])
@pytest.mark.parametrize("rows", [1, 3, 64, 300])
def test_both_kernels_compute_the_same_product_to_the_last_bits(reduce_range, rows, monkeypatch):
    """The same int32 sums of the same int8 values; only the float scaling's order may differ:
    a few units in the last place of float32 (2^-23 relative), not int8's rounding (~1e-2)."""
    monkeypatch.setenv(int8_linear.KERNEL_ENV, "onednn")  # both kernels packed on every CPU path
    layer = Int8Linear(int8_weight(96, 256, seed=3), torch.randn(96), reduce_range=reduce_range)
    x = torch.randn(rows, 256) * 3
    few = torch.ops.quantized.linear_dynamic(x, layer.few, reduce_range)
    many = torch.ops.quantized.linear_dynamic(x, layer.many, reduce_range)
    scale = few.abs().max().item()
    assert (few - many).abs().max().item() <= 8 * 2.0**-23 * scale


@torch.no_grad()
def test_eight_bit_activations_halve_the_error_against_float32():
    """full range (VNNI) against reduce_range, both through fbgemm at few rows."""
    torch.manual_seed(0)
    linear = nn.Linear(256, 256)
    x = torch.randn(16, 256)
    exact = linear(x)
    weight, bias = dynamic(linear)._weight_bias()
    if not full_range():
        pytest.skip("no AVX-512 VNNI (or oneDNN held below it): nmt keeps activations to 7 bits here")
    errors = {}
    for reduce_range in (True, False):
        layer = Int8Linear(weight, bias, reduce_range=reduce_range)
        layer.many_from = NEVER
        errors[reduce_range] = (layer(x) - exact).abs().max().item()
    assert errors[False] < 0.7 * errors[True]


@torch.no_grad()
def test_eight_bit_activations_do_not_saturate_where_nmt_uses_them():
    """The worst case of 16-bit pair sums: activations at the top of the range and int8 weights of
    127 (255 * 127 * 2 > 32,767). Where ``full_range`` holds, both kernels give the exact sums."""
    if not full_range():
        pytest.skip("no AVX-512 VNNI (or oneDNN held below it): nmt keeps activations to 7 bits here")
    weight = torch.quantize_per_channel(
        torch.full((8, 64), 127.0),
        torch.ones(8, dtype=torch.double),
        torch.zeros(8, dtype=torch.long),
        0,
        torch.qint8,
    )  # every weight 127, scale 1
    layer = Int8Linear(weight, None, reduce_range=False)
    x = torch.zeros(3, 64)
    x[:, 0], x[:, 1:] = -1.0, 1.0  # scale 2/255: 1.0 quantizes to 255, -1.0 to 0 (zero point 128)
    exact = (x.sum(dim=1, keepdim=True) * 127).expand(3, 8)  # (3, 8): 62 * 127 = 7,874
    packed_both = (layer.few, int8_linear.prepack(*layer._weight_bias(), "onednn") if ONEDNN else None)
    for packed in [p for p in packed_both if p is not None]:
        got = torch.ops.quantized.linear_dynamic(x, packed, False)
        torch.testing.assert_close(got, exact, rtol=1e-2, atol=0.0)  # x rounds by 1/255; saturation halves


def test_many_from_sends_wide_outputs_earlier_and_deep_inputs_never(monkeypatch):
    monkeypatch.delenv(int8_linear.KERNEL_ENV, raising=False)
    monkeypatch.setattr(int8_linear, "full_range", lambda: True)
    assert [many_from(256, o) for o in (256, 1024, 8000)] == [512, 128, 64]
    assert many_from(512, 37000) == 64 and many_from(1024, 256) == NEVER
    assert many_from(256, 1024, threads=2) == 256  # rows a thread
    monkeypatch.setattr(int8_linear, "full_range", lambda: False)  # no VNNI: fbgemm at every row count
    assert many_from(256, 8000) == NEVER
    monkeypatch.setenv(int8_linear.KERNEL_ENV, "onednn")
    assert many_from(1024, 256) == 0
    monkeypatch.setenv(int8_linear.KERNEL_ENV, "fbgemm")
    assert many_from(256, 8000) == NEVER
    monkeypatch.setenv(int8_linear.KERNEL_ENV, "mkl")
    with pytest.raises(ValueError, match="NMT_INT8_KERNEL"):
        many_from(256, 256)


def test_full_range_needs_avx512_vnni_and_onednn_not_held_below_it(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(int8_linear, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    assert full_range()
    for capped in ("AVX2", "avx512_core"):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", capped)
        assert not full_range()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")
    assert full_range()
    monkeypatch.setattr(
        int8_linear, "cpu_flags", lambda: frozenset({"avx2", "avx_vnni"})
    )  # fbgemm: AVX2 kernels
    assert not full_range()


@torch.no_grad()
def test_a_layer_keeps_onednn_s_copy_only_where_it_may_use_it(monkeypatch):
    monkeypatch.setattr(int8_linear, "full_range", lambda: False)  # no VNNI: fbgemm at every row count
    monkeypatch.delenv(int8_linear.KERNEL_ENV, raising=False)
    layer = Int8Linear(int8_weight(64, 32), None, reduce_range=True)
    assert layer.many is None and layer.many_from == NEVER
    assert layer(torch.randn(5000, 32)).shape == (5000, 64)
