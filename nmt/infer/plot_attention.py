"""`nmt plot-attention CHECKPOINT "sentence" -o DIR`: heatmaps of every attention layer and head.

The sentence is translated (beam search), then ``nmt.infer.attention.attention_maps`` gives the
weights of the encoder self-attention, the decoder self-attention and the encoder-decoder
attention; each (kind, layer) becomes one PNG with one heatmap per head, as in the paper's
appendix (Figures 3-5 show encoder self-attention heads of layer 5 of 6):

    DIR/encoder-self-layer{1..L}.png   source pieces x source pieces
    DIR/decoder-self-layer{1..L}.png   target inputs (<s> + output) x the same (causal)
    DIR/cross-layer{1..L}.png          target inputs x source pieces (row t predicts output t)
    DIR/attention.json                 the pieces and every weight, for other tools
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


class PlotAttentionError(Exception):
    """A user-facing error of `nmt plot-attention`."""


def add_plot_attention_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint directory or run directory")
    parser.add_argument("sentence", help="the source sentence (raw text)")
    parser.add_argument("-o", "--output", required=True, help="folder for the PNG files")
    parser.add_argument("--beam", type=int, default=4, help="beam size of the translation (paper: 4)")
    parser.add_argument("--max-len-b", type=int, default=50, help="output length limit |x| + b (paper: 50)")
    parser.add_argument("--device", default="cpu")


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


def run_plot_attention(args: argparse.Namespace, overrides: dict) -> int:
    from ..checkpoint import CheckpointError
    from .attention import attention_maps
    from .translate import Translator

    if args.beam < 1:
        raise PlotAttentionError(f"--beam {args.beam}: must be >= 1")
    try:
        translator = Translator.load(args.checkpoint, device=args.device, precision="fp32")
    except CheckpointError as e:
        raise PlotAttentionError(str(e)) from None
    sources, _ = translator.encode([args.sentence])
    if not sources[0]:
        raise PlotAttentionError("the sentence is empty")
    best = translator.translate_nbest([args.sentence], beam=args.beam, alpha=0.0 if args.beam == 1 else 0.6,
                                       max_len_b=args.max_len_b)[0][0]
    maps = attention_maps(translator.model, sources[0], best.tokens)
    src = piece_labels(translator.sp, sources[0])
    tgt = ["<s>"] + piece_labels(translator.sp, best.tokens)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    figures = 0  # the encoder and the decoder may differ in depth (model.n_encoder_layers)
    for layer in range(maps.encoder_self.size(0)):
        draw(maps.encoder_self[layer].numpy(), src, src, f"encoder self-attention, layer {layer + 1}",
             out / f"encoder-self-layer{layer + 1}.png")
        figures += 1
    for layer in range(maps.cross.size(0)):
        draw(maps.decoder_self[layer].numpy(), tgt, tgt, f"decoder self-attention, layer {layer + 1}",
             out / f"decoder-self-layer{layer + 1}.png")
        draw(maps.cross[layer].numpy(), tgt, src,
             f"encoder-decoder attention, layer {layer + 1} (rows: decoder inputs)",
             out / f"cross-layer{layer + 1}.png")
        figures += 2
    data = {"source": args.sentence, "translation": best.text, "source_pieces": src, "target_pieces": tgt,
            "encoder_self": maps.encoder_self.tolist(), "decoder_self": maps.decoder_self.tolist(),
            "cross": maps.cross.tolist()}
    tmp = out / "attention.json.tmp"
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(out / "attention.json")
    print(f"{best.text}\nnmt plot-attention: wrote {figures} PNG files and attention.json to {out}",
          file=sys.stderr)
    return 0
