"""Float32 CPU inference through oneDNN with pre-packed weights (what `Translator.load` does).

PyTorch's float32 ``F.linear`` on the CPU calls MKL's sgemm, which repacks the weight on every
call and, on AMD CPUs, does not use AVX-512. oneDNN (bundled with PyTorch as ``torch.ops.mkldnn``)
can pack a weight once into its blocked layout and then multiply with the CPU's widest vector
units (decoding speed: benchmarks/translate_speed.py; where a decode's time goes:
benchmarks/profile_decode.py). The math is the same float32 product (results equal to ~1e-5
relative, from another summation order; a row's result does not depend on the batch around it).
CTranslate2 owes much of its CPU speed to the same library. Where MKL's sgemm over the weight
stored (in, out) gives each row the same result at every row count on this machine (checked per
weight shape at load, nmt.infer.linear_kernel), a layer uses it instead: it costs less a call at
the few rows of a decoding step.

``pack_linears(model)`` swaps every ``nn.Linear`` of an inference model for a ``PackedLinear``
that keeps the original parameters (same ``state_dict``, same parameter counts) plus the packed
copy, and gives a tied output projection (section 3.4) its own ``PackedLinear`` over the shared
embedding matrix. A ``PackedLinear`` computes with the packed copy only for float32 CPU inputs
outside autograd; otherwise (training, bf16 autocast, another device) it is ``F.linear``. The
packed copy is taken once: pack a model after its weights are final (Translator.load does). It
doubles the memory held by the linear weights (the original is kept for state_dict and autograd).
Attention's projections are fused (nmt.fused_projections: self-attention's three one product over
[W^Q; W^K; W^V], cross-attention's keys and values one over [W^K; W^V]) into packed layers: fewer,
larger oneDNN calls, whose fixed cost (~20 us each) is much of a beam-search step on small batches
(the fused copies hold those weights twice more). A feed-forward network's ReLU (section 3.3) is
fused into its ``fc1`` (oneDNN applies it as the product is written; the layer's own activation
becomes the identity), so the (rows, d_ff) activations are not read and written a second time.
"Packed" names oneDNN's weight layout only; "fused", one computation for several (nmt.fused_projections).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..fused_projections import fuse_projections, fused_weights
from . import linear_kernel


def onednn_available() -> bool:
    """True where this torch build has oneDNN's packed linear ops."""
    mkldnn = torch.ops.mkldnn
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(mkldnn, "_reorder_linear_weight")
        and hasattr(mkldnn, "_linear_pointwise")
    )


class PackedLinear(nn.Module):
    """``y = x W^T + b`` with W (out, in) also held in oneDNN's packed layout, or transposed (in, out)
    for MKL's sgemm where ``linear_kernel.choose`` takes MKL for its shape (``kernel``)."""

    def __init__(
        self,
        weight: nn.Parameter,
        bias: nn.Parameter | None,
        *,
        relu: bool = False,
        kernel: str | None = None,
    ):
        super().__init__()
        self.weight, self.bias = weight, bias  # the original parameters (shared, not copied)
        self.relu = relu  # y = max(0, x W^T + b)
        # "mkl" or "onednn"; None: chosen for this shape (a layer's rows, e.g. a shortlist's, take its kernel)
        self.kernel = kernel or linear_kernel.choose(weight.size(1), weight.size(0), bias is not None)
        with torch.no_grad():
            w = weight.detach().float().cpu()  # (out, in)
            if self.kernel == "mkl":
                packed = w.t().contiguous()  # (in, out): MKL's sgemm reads it without a transpose
            else:
                packed = torch.ops.mkldnn._reorder_linear_weight(w)  # (out, in), blocked
        self.register_buffer("packed", packed, persistent=False)

    @property
    def in_features(self) -> int:
        return self.weight.size(1)

    @property
    def out_features(self) -> int:
        return self.weight.size(0)

    @staticmethod
    def applies(x: Tensor) -> bool:
        """Whether the packed product is used for input ``x``: float32 on the CPU outside autograd
        and outside a lower-precision autocast."""
        return (
            x.dtype == torch.float32
            and x.device.type == "cpu"
            and not torch.is_grad_enabled()
            and not (torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") != torch.float32)
        )

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out)."""
        if not self.applies(x):
            y = F.linear(x, self.weight, self.bias)
            return F.relu(y) if self.relu else y
        bias = None if self.bias is None else self.bias.detach()
        if self.kernel == "mkl":
            y = linear_kernel.mkl_linear(x.reshape(-1, x.size(-1)), self.packed, bias)  # (R, out)
            y = y.view(*x.shape[:-1], y.size(-1))  # (..., out)
            return y.relu_() if self.relu else y
        return torch.ops.mkldnn._linear_pointwise(
            x, self.packed, bias, "relu" if self.relu else "none", [], ""
        )

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
            + (", relu=True" if self.relu else "")
            + f", kernel={self.kernel}"
        )


def usable(linear: nn.Linear) -> bool:
    """A float32 CPU layer (what oneDNN packing is for)."""
    return linear.weight.dtype == torch.float32 and linear.weight.device.type == "cpu"


def _identity(x: Tensor) -> Tensor:
    return x


def packed_fusion(layers: list[nn.Module]) -> PackedLinear | None:
    """One ``PackedLinear`` over the fused weights of ``layers`` (attention's projections), or None
    (left unfused) where they were not all packed."""
    return PackedLinear(*fused_weights(layers)) if all(isinstance(m, PackedLinear) for m in layers) else None


def pack_linears(model: nn.Module) -> nn.Module:
    """Replace, in place, every ``nn.Linear`` of ``model`` (a CPU float32 model in eval mode) by a
    ``PackedLinear`` over the same parameters; a Transformer whose decoder ties its output
    projection to the embeddings gets a ``PackedLinear`` over that matrix as
    ``decoder.output_projection``; an ``fc1`` followed by ReLU computes the ReLU itself (the
    layer's ``activation`` becomes the identity); each attention's projections are fused into one
    ``PackedLinear`` (nmt.fused_projections). Returns ``model``; a no-op where oneDNN is missing."""
    if not onednn_available():
        return model
    for layer in list(model.modules()):  # feed-forward networks: fuse ReLU into fc1
        fc1 = getattr(layer, "fc1", None)
        if type(fc1) is nn.Linear and getattr(layer, "activation", None) is F.relu and usable(fc1):
            layer.fc1 = PackedLinear(fc1.weight, fc1.bias, relu=True)
            layer.activation = _identity
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and usable(child):
                setattr(parent, name, PackedLinear(child.weight, child.bias))
    fuse_projections(model, packed_fusion)  # one product for q, k, v (or k, v)
    decoder = getattr(model, "decoder", None)
    if decoder is not None and getattr(decoder, "output_projection", 1) is None:
        # tied: the same matrix (and the output bias of a model that has one)
        bias = getattr(decoder, "output_bias", None)
        decoder.output_projection = PackedLinear(decoder.embed_tokens.weight, bias)
    return model
