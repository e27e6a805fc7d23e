"""`--precision int8`: dynamic int8 quantization of a Transformer's linear layers for CPU inference.

torch.ao's dynamic quantization (fbgemm on x86, qnnpack on ARM) stores each ``nn.Linear`` weight as
int8 with one scale per output row and quantizes the activations on the fly per call; the rest
(embeddings, LayerNorm, attention softmax) stays float32. The output projection is a linear layer
too: with tied embeddings (section 3.4) it is copied into its own ``nn.Linear`` first, so that it
is quantized while the input embeddings keep their float32 table. Self-attention's q/k/v and
cross-attention's k/v projections are also fused into one layer each (``FusedLinear``,
nmt.fused_projections). Each int8 layer then becomes an ``Int8Linear`` (nmt.infer.int8_linear):
the same int8 weights, multiplied by fbgemm at few rows and oneDNN at many, with 8-bit activations
where the CPU's int8 products cannot saturate.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor, nn

from ..fused_projections import fuse_projections, fused_weights
from ..model import Transformer
from .int8_linear import swap_into


class FusedLinear(nn.Module):
    """Projections fused into one ``nn.Linear``, their weights concatenated by rows (quantized with
    the others): an int8 model's ``MultiheadAttention.fused_qkv`` / ``fused_kv``, one int8 product
    instead of three or two. Each output row keeps its own scale, and the input is quantized once
    either way, so the results are those of the separate layers."""

    def __init__(self, layers):
        super().__init__()
        weight, bias = fused_weights(layers)  # (sum out, in), (sum out,)
        self.linear = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
        with torch.no_grad():
            self.linear.weight.copy_(weight)
            if bias is not None:
                self.linear.bias.copy_(bias)

    @staticmethod
    def applies(x: Tensor) -> bool:
        return True  # an int8 model only translates

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(x)


def quantize_int8(model: Transformer) -> Transformer:
    """A CPU copy of ``model`` (eval mode) whose linear layers run in int8 (weights per row)."""
    engines = torch.backends.quantized.supported_engines
    engine = next((e for e in ("fbgemm", "x86", "qnnpack") if e in engines), None)
    if engine is None:
        raise RuntimeError(f"no int8 backend in this torch build (supported: {engines})")
    torch.backends.quantized.engine = engine
    model = copy.deepcopy(model).cpu().eval()
    decoder = model.decoder
    if decoder.output_projection is None:  # tied: an untied float32 copy of the table, quantized below
        weight = decoder.embed_tokens.weight  # (W, D)
        bias = getattr(decoder, "output_bias", None)  # (W,) or None
        decoder.output_projection = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
        decoder.output_projection.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)
        if bias is not None:
            decoder.output_projection.bias = nn.Parameter(bias.detach().clone(), requires_grad=False)
    fuse_projections(model, FusedLinear)  # one product for q, k, v (or k, v)
    # torch 2.13 marks torch.ao eager quantization deprecated (in favour of the separate torchao
    # package) but ships and runs it; its warnings are not the user's concern here
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        model = torch.ao.quantization.quantize_dynamic(
            model,
            {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig},
            dtype=torch.qint8,
            inplace=True,
        )
    return swap_into(model)  # fbgemm's kernel at few rows, oneDNN's at many
