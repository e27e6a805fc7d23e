"""A dynamic int8 linear layer with two kernels, fbgemm's for few rows and oneDNN's for many, and
activations over the full 8 bits where the CPU's int8 products cannot saturate.

``Int8Linear`` holds W as int8 with one scale per output row (as torch.ao's dynamic ``Linear``)
and quantizes its input per call (one scale for the call's rows). Two libraries bundled with
PyTorch multiply it: fbgemm has the smaller fixed cost a call (a decoding step of a few
sentences), oneDNN the faster product over many rows (the encoder, beam search over full
batches); a layer multiplies ``rows >= many_from`` rows through oneDNN, the crossover by shape
that benchmarks/int8_kernels.py measures (``NMT_INT8_KERNEL=fbgemm|onednn`` holds one). Both
compute the same int32 sums of the same int8 values; their results differ in the last bit of the
float scaling at most (an int8 translation depends on its batch already: the input's scale is one
for all the rows of a call).

Range: fbgemm's AVX2 kernels add pairs of u8 x s8 products in 16 bits, which saturates unless
the activations keep to 7 bits (torch.ao's ``reduce_range``, its default on x86). With AVX-512
VNNI (``vpdpbusd``, 32-bit sums) in both libraries nothing saturates, and ``full_range`` gives the
activations all 8 bits: half the rounding error of each product (outputs closer to float32's).
"""

from __future__ import annotations

import os

import torch
from torch import Tensor, nn

from ..precision import cpu_flags

KERNEL_ENV = "NMT_INT8_KERNEL"
NEVER = 1 << 62  # many_from where oneDNN is never the faster
# oneDNN ISA caps (ONEDNN_MAX_CPU_ISA) below AVX-512 VNNI: its int8 products there add in 16 bits
ONEDNN_BELOW_VNNI = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE")


def swap_into(model: nn.Module) -> nn.Module:
    """Replace, in place, each of torch.ao's dynamic int8 ``Linear`` layers of ``model`` by an
    ``Int8Linear`` of the same int8 weights and bias (activations over ``full_range``); a no-op
    where this torch lacks fbgemm. Returns ``model``."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return model
    reduce_range = not full_range()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, DynamicLinear):
                weight, bias = child._weight_bias()  # (out, in) qint8 per row, (out,) or None
                setattr(parent, name, Int8Linear(weight, bias, reduce_range=reduce_range))
    return model


def full_range() -> bool:
    """Whether activations may use all 8 bits: the CPU has AVX-512 VNNI (fbgemm's and oneDNN's
    32-bit int8 sums) and oneDNN is not held below it by ``ONEDNN_MAX_CPU_ISA``."""
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper() in ONEDNN_BELOW_VNNI
    return "avx512_vnni" in cpu_flags() and not capped


def prepack(weight: Tensor, bias: Tensor | None, engine: str):
    """``weight`` (out, in) qint8 per row and ``bias`` (out,) packed for ``engine``'s kernel."""
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        return torch.ops.quantized.linear_prepack(weight, bias)
    finally:
        torch.backends.quantized.engine = previous


def many_from(in_features: int, out_features: int, threads: int = 1) -> int:
    """The fewest rows a layer multiplies through oneDNN (``NMT_INT8_KERNEL``: auto, the rule below;
    fbgemm or onednn, that kernel at every row count). The rule is the crossover
    benchmarks/int8_kernels.py measured per shape on a Xeon with AVX-512 VNNI, at 1 and 2 threads:
    64-512 rows a thread, the fewer the wider the output (256 -> 512, 1,024 -> 128, 8,000 -> 64),
    times ``threads`` (at 2 threads the crossover was about twice the rows of 1); never for an
    input of 1,024 or more, where fbgemm kept up at 2,000 rows, and never without AVX-512 VNNI
    (``full_range`` False), where oneDNN's int8 ran at 0.3-0.5x fbgemm's at every row count (the
    same Xeon held to AVX2). A fixed rule, not a timing at start-up, so that the same command
    gives the same translation."""
    kernel = os.environ.get(KERNEL_ENV, "auto").strip().lower() or "auto"
    if kernel not in ("auto", "fbgemm", "onednn"):
        raise ValueError(f"{KERNEL_ENV}={kernel!r}: expected auto, fbgemm or onednn")
    if kernel != "auto":
        return 0 if kernel == "onednn" else NEVER
    if in_features >= 1024 or not full_range():
        return NEVER
    return max(64, min(512, 1 << (131072 // out_features).bit_length() - 1)) * max(1, threads)


class Int8Linear(nn.Module):
    """``y = x W^T + b``, W int8 per output row, x quantized per call: fbgemm below ``many_from``
    rows, oneDNN from there (where this torch has both), activations over 8 bits or 7
    (``reduce_range``, see the module docstring)."""

    def __init__(self, weight: Tensor, bias: Tensor | None, *, reduce_range: bool):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.reduce_range = reduce_range
        self.few = prepack(weight, bias, "fbgemm")
        threads = torch.get_num_threads()  # at load: `nmt translate --threads` sets it before
        self.many_from = many_from(self.in_features, self.out_features, threads)
        if "onednn" not in torch.backends.quantized.supported_engines:
            self.many_from = NEVER
        # oneDNN's copy of the weights only where it is used
        self.many = prepack(weight, bias, "onednn") if self.many_from < NEVER else None

    def _weight_bias(self) -> tuple[Tensor, Tensor | None]:
        """The int8 weight (out, in) with its per-row scales, and the bias (out,) or None."""
        return torch.ops.quantized.linear_unpack(self.few)

    def forward(self, x: Tensor) -> Tensor:
        """(..., in) -> (..., out), float32."""
        rows = x.numel() // self.in_features
        packed = self.many if rows >= self.many_from else self.few
        return torch.ops.quantized.linear_dynamic(x.float(), packed, self.reduce_range)

    def extra_repr(self) -> str:
        many = "never" if self.many_from >= NEVER else f"from {self.many_from} rows"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"reduce_range={self.reduce_range}, onednn {many}"
        )
