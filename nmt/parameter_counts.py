"""Parameter counts of a Transformer per component (the paper's Table 3 "params" column; ``nmt
model-info``, ``GET /models``)."""

from __future__ import annotations

from torch import nn

from .model import Transformer


def parameter_counts(model: Transformer) -> dict[str, int]:
    """Unique parameters per component (a tied matrix is counted once, under 'embeddings')."""
    seen: set[int] = set()

    def count(module: nn.Module | None) -> int:
        new = [p for p in (module.parameters() if module is not None else ()) if id(p) not in seen]
        seen.update(id(p) for p in new)
        return sum(p.numel() for p in new)

    out = {"embeddings": count(model.encoder.embed_tokens) + count(model.decoder.embed_tokens)}
    out["positions (learned)"] = count(model.encoder.embed) + count(model.decoder.embed)
    out["encoder"] = count(model.encoder)
    out["decoder"] = count(model.decoder.layers) + count(model.decoder.layer_norm)
    out["output projection"] = count(model.decoder.output_projection)
    out["total"] = sum(out.values())
    return out
