"""Which library multiplies a float32 inference layer (nmt.infer.linear_kernel): MKL only where its
products are row-independent on this machine, one row multiplied as two, oneDNN otherwise."""

import pytest
import torch
from torch import nn

from nmt.infer import linear_kernel
from nmt.infer.linear_kernel import choose, mkl_linear, rows_independent
from nmt.infer.packed import PackedLinear, onednn_available

pytestmark = pytest.mark.numerics


def test_a_product_whose_rows_depend_on_their_count_or_place_is_refused():
    def rowwise(x):  # each row on its own (elementwise): independent of the rows beside it
        return x[:, :8] * 2.0 + 1.0

    assert rows_independent(rowwise, 16)
    # a row's result moves with the number of rows multiplied (as MKL's AVX2 path at 2, 3, 8, ...)
    assert not rows_independent(lambda x: rowwise(x) + (x.size(0) % 3 == 2) * 1e-6, 16)
    # only a lone row differs (MKL's one-row product): the probe starts at one row
    assert not rows_independent(lambda x: rowwise(x) + (x.size(0) == 1) * 1e-6, 16)
    # the same count everywhere, but a row's place in the call changes it: the offsets catch it
    assert not rows_independent(lambda x: rowwise(x) + torch.arange(x.size(0))[:, None] * 1e-6, 16)


def test_choose_takes_mkl_only_where_the_probe_passes_once_per_shape_and_threads(monkeypatch):
    calls = []
    verdict = {"value": True}

    def probe(product, in_features):
        calls.append(in_features)
        return verdict["value"]

    monkeypatch.setattr(linear_kernel, "rows_independent", probe)
    monkeypatch.setattr(linear_kernel, "_chosen", {})
    monkeypatch.delenv(linear_kernel.ENV, raising=False)
    assert choose(24, 40, True) == "mkl" and choose(24, 40, True) == "mkl" and calls == [24]
    verdict["value"] = False
    assert choose(24, 48, True) == "onednn" and calls == [24, 24]
    monkeypatch.setenv(linear_kernel.ENV, "onednn")  # oneDNN everywhere, no probe
    assert choose(24, 56, True) == "onednn" and calls == [24, 24]
    monkeypatch.setenv(linear_kernel.ENV, "mkl")
    with pytest.raises(ValueError, match="NMT_LINEAR_KERNEL"):
        choose(24, 56, True)


def test_one_row_is_multiplied_as_two_rows():
    """MKL's one-row product sums in another order than its product of two rows; a lone row is
    multiplied beside a copy of itself and gives the bits it gets among others wherever the
    product of two rows is row-independent (what the probe checks)."""
    torch.manual_seed(0)
    weight_t, bias = torch.randn(64, 32), torch.randn(32)
    x = torch.randn(1, 64)
    two = torch.addmm(bias, x.expand(2, -1).contiguous(), weight_t)
    assert torch.equal(mkl_linear(x, weight_t, bias), two[:1])
    assert mkl_linear(torch.randn(0, 64), weight_t, None).shape == (0, 32)


@pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")
def test_a_layer_on_mkl_computes_the_linear_layer_and_its_relu(monkeypatch):
    monkeypatch.setattr(linear_kernel, "choose", lambda *shape: "mkl")
    torch.manual_seed(0)
    weight, bias = nn.Parameter(torch.randn(48, 64)), nn.Parameter(torch.randn(48))
    layer, relu = PackedLinear(weight, bias), PackedLinear(weight, bias, relu=True)
    assert layer.kernel == "mkl" and layer.packed.shape == (64, 48)  # (in, out)
    x = torch.randn(2, 5, 64)
    with torch.inference_mode():
        want = x @ weight.T + bias
        scale = want.abs().max().item()
        torch.testing.assert_close(layer(x), want, rtol=0, atol=64 * 2.0**-23 * scale)
        torch.testing.assert_close(relu(x), want.clamp_min(0), rtol=0, atol=64 * 2.0**-23 * scale)
        assert layer(x[:1, :1]).shape == (1, 1, 48)  # one row, multiplied as two


@pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")
def test_a_layer_given_its_kernel_is_not_probed(monkeypatch):
    def refuse(*shape):
        raise AssertionError("probed")

    monkeypatch.setattr(linear_kernel, "choose", refuse)
    weight = nn.Parameter(torch.randn(8, 16))
    assert PackedLinear(weight, None, kernel="mkl").packed.shape == (16, 8)
    assert PackedLinear(weight, None, kernel="onednn").kernel == "onednn"


@pytest.mark.skipif(not onednn_available(), reason="this torch has no oneDNN")
def test_whichever_kernel_this_machine_takes_a_row_does_not_depend_on_the_rows_beside_it():
    """The property the choice keeps: on this CPU path (MKL where the probe passed, else oneDNN)
    each row of a demo-sized layer gets the same bits at every row count up to 300."""
    torch.manual_seed(0)
    for out_features in (256, 1024):
        layer = PackedLinear(
            nn.Parameter(torch.randn(out_features, 256) / 16), nn.Parameter(torch.randn(out_features))
        )
        x = torch.randn(300, 256)
        with torch.inference_mode():
            full = layer(x)
            for rows in (1, 2, 3, 4, 6, 7, 9, 13, 31, 64, 65, 127, 200):
                assert torch.equal(layer(x[:rows]), full[:rows]), (layer.kernel, out_features, rows)
