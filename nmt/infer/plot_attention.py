"""Heatmaps of every attention layer and head.

The sentence is translated (beam search), then ``nmt.infer.attention_maps.attention_maps`` gives the
weights of the encoder self-attention, the decoder self-attention and the encoder-decoder
attention; each (kind, layer) becomes one PNG with one heatmap per head, as in the paper's
appendix (Figures 3-5 show encoder self-attention heads of layer 5 of 6):

    DIR/encoder-self-layer{1..L}.png   source pieces x source pieces
    DIR/decoder-self-layer{1..L}.png   target inputs (<s> + output) x the same (causal)
    DIR/cross-layer{1..L}.png          target inputs x source pieces (row t predicts output t)
    DIR/attention.json                 the pieces and every weight, for other tools

``nmt plot-attention CHECKPOINT "sentence" -o DIR`` (nmt.infer.plot_attention_command) writes them.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import UserError
from .options import SearchOptions


class PlotAttentionError(UserError):
    """A user-facing error of `nmt plot-attention`."""


def piece_labels(sp, ids: list[int]) -> list[str]:
    """Readable labels: SentencePiece pieces with the word-start mark, '<s>' and '</s>'."""
    return [sp.id_to_piece(i) for i in ids]


def draw(weights, rows: list[str], cols: list[str], title: str, path: Path) -> None:
    """weights (H, len(rows), len(cols)) -> one PNG with a heatmap per head."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = weights.shape[0]
    ncols = min(4, h)
    nrows = (h + ncols - 1) // ncols
    cell = max(2.2, 0.28 * max(len(rows), len(cols)))
    fig, axes = plt.subplots(nrows, ncols, figsize=(cell * ncols + 0.5, cell * nrows + 0.8), squeeze=False)
    for head in range(nrows * ncols):
        ax = axes[head // ncols][head % ncols]
        if head >= h:
            ax.axis("off")
            continue
        ax.imshow(weights[head], cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(f"head {head + 1}", fontsize=9)
        ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
        ax.set_yticks(range(len(rows)), rows, fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    tmp.replace(path)


def plot_attention(
    translator, sentence: str, out: Path, options: SearchOptions = SearchOptions()
) -> tuple[str, int]:
    """Translate ``sentence`` with ``translator`` (a torch-engine Translator) searched with
    ``options`` (default: beam 4, alpha 0.6) and write the PNG files and attention.json of the
    module docstring into ``out`` (created if needed). Returns (the translation, the number of
    PNG files written)."""
    from .attention_maps import attention_maps

    sources, _ = translator.encode([sentence])
    if not sources[0]:
        raise PlotAttentionError("the sentence is empty")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file there, or above it
        raise PlotAttentionError(f"-o {out}: cannot create the folder: {e.strerror or e}") from None
    best = translator.translate_nbest([sentence], options.replace(nbest=1))[0][0]
    maps = attention_maps(translator.model, sources[0], best.tokens)
    src = piece_labels(translator.sp, sources[0])
    tgt = ["<s>"] + piece_labels(translator.sp, best.tokens)
    figures = 0  # the encoder and the decoder may differ in depth (model.n_encoder_layers)
    for layer in range(maps.encoder_self.size(0)):
        draw(
            maps.encoder_self[layer].numpy(),
            src,
            src,
            f"encoder self-attention, layer {layer + 1}",
            out / f"encoder-self-layer{layer + 1}.png",
        )
        figures += 1
    for layer in range(maps.cross.size(0)):
        draw(
            maps.decoder_self[layer].numpy(),
            tgt,
            tgt,
            f"decoder self-attention, layer {layer + 1}",
            out / f"decoder-self-layer{layer + 1}.png",
        )
        draw(
            maps.cross[layer].numpy(),
            tgt,
            src,
            f"encoder-decoder attention, layer {layer + 1} (rows: decoder inputs)",
            out / f"cross-layer{layer + 1}.png",
        )
        figures += 2
    data = {
        "source": sentence,
        "translation": best.text,
        "source_pieces": src,
        "target_pieces": tgt,
        "encoder_self": maps.encoder_self.tolist(),
        "decoder_self": maps.decoder_self.tolist(),
        "cross": maps.cross.tolist(),
    }
    tmp = out / "attention.json.tmp"
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(out / "attention.json")
    return best.text, figures
