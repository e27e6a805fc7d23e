"""Which library multiplies a float32 inference linear layer on the CPU: oneDNN's pre-packed
product or MKL's sgemm over the weight stored transposed, chosen per weight shape on the machine.

A decoding step multiplies few rows (a batch's last sentences, one sentence at a time): there
oneDNN's packed product has a fixed cost of ~25 us a call, MKL's sgemm over a (in, out) weight
2-4x less (benchmarks/profile_decode.py times a decode's linear layers by shape). But a
translation must not depend on the sentences batched with it, so a row's product must not depend
on how many rows are multiplied with it. oneDNN's never does; MKL's does on some code paths (its
AVX2 path at every inner size, its AVX-512 path at an inner size of 1,024 or more, and its
one-row product everywhere). ``choose`` therefore runs MKL's product on rows of random data at
many row counts and offsets and takes it for a shape only where every row came out bit for bit
as in a larger product (one row is multiplied as two, the row twice, since MKL's one-row path
sums in another order). The check is deterministic: the same machine and thread count choose
the same kernel, so the same command gives the same translation. ``NMT_LINEAR_KERNEL=onednn`` in
the environment keeps oneDNN everywhere.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

ENV = "NMT_LINEAR_KERNEL"  # auto (default) | onednn
REFERENCE_ROWS = 1100  # the larger product every smaller one is compared with
# row counts where MKL's kernels change (its one-row product; its AVX2 path fails at most counts)
PROBE_ROWS = (1, 2, 3, 5, 8, 16, 17, 33, 64, 65, 129, 257, 513, 1025)
PROBE_OFFSETS = (1, 3, 17, 50, 333)  # 7 rows starting there
WIDE = 2048  # a wider layer (an output layer) is probed at this width plus its width's remainder by 64

_chosen: dict[tuple[int, int, bool, int], str] = {}


def mkl_linear(x: Tensor, weight_t: Tensor, bias: Tensor | None) -> Tensor:
    """x (R, in) @ weight_t (in, out) + bias -> (R, out) through MKL's sgemm; one row is multiplied
    as two (MKL's one-row product sums in another order than its product of two or more rows)."""
    rows = x.size(0)
    if rows == 1:
        x = x.expand(2, -1).contiguous()  # (2, in)
    y = torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)  # (R, out)
    return y[:1] if rows == 1 else y


def rows_independent(product, in_features: int) -> bool:
    """Whether ``product`` ((R, in) -> (R, out)) gives each row the same bits at every row count
    of PROBE_ROWS and at every offset of PROBE_OFFSETS as within REFERENCE_ROWS rows."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(REFERENCE_ROWS, in_features, generator=generator)  # (R, in)
    full = product(x)  # (R, out)
    if any(not torch.equal(product(x[:rows]), full[:rows]) for rows in PROBE_ROWS):
        return False
    return all(torch.equal(product(x[at : at + 7]), full[at : at + 7]) for at in PROBE_OFFSETS)


def choose(in_features: int, out_features: int, has_bias: bool) -> str:
    """ "mkl" where MKL's product over a weight of this shape is row-independent on this machine at
    the current thread count (and ``NMT_LINEAR_KERNEL`` is not ``onednn``), else "onednn". Checked
    once per shape and thread count in a process (0.1-0.2 s for the demo model at load)."""
    setting = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if setting not in ("auto", "onednn"):
        raise ValueError(f"{ENV}={setting!r}: expected auto or onednn")
    if setting == "onednn":
        return "onednn"
    key = (in_features, out_features, has_bias, torch.get_num_threads())
    if key not in _chosen:
        generator = torch.Generator().manual_seed(1)
        width = out_features if out_features <= WIDE else WIDE + out_features % 64  # the time it takes
        weight_t = torch.randn(in_features, width, generator=generator) / in_features**0.5
        bias = torch.randn(width, generator=generator) if has_bias else None
        independent = rows_independent(lambda x: mkl_linear(x, weight_t, bias), in_features)
        _chosen[key] = "mkl" if independent else "onednn"
    return _chosen[key]
