"""The command line of `nmt plot-attention`: its arguments and its run over
nmt.infer.plot_attention (one sentence translated, a heatmap per attention layer and head). User
errors are PlotAttentionError, which `nmt` prints as one line (nmt/cli.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..checkpoint import CheckpointError
from .options import SearchOptions
from .plot_attention import PlotAttentionError, plot_attention
from .translate import Translator


def add_plot_attention_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint directory or run directory")
    parser.add_argument("sentence", help="the source sentence (raw text)")
    parser.add_argument("-o", "--output", required=True, help="folder for the PNG files")
    parser.add_argument("--beam", type=int, default=4, help="beam size of the translation (paper: 4)")
    parser.add_argument("--max-len-b", type=int, default=50, help="output length limit |x| + b (paper: 50)")
    parser.add_argument("--device", default="cpu")


def run_plot_attention(args: argparse.Namespace, overrides: dict) -> int:
    if args.beam < 1:
        raise PlotAttentionError(f"--beam {args.beam}: must be >= 1")
    try:
        translator = Translator.load(args.checkpoint, device=args.device, precision="fp32")
    except CheckpointError as e:
        raise PlotAttentionError(str(e)) from None
    out = Path(args.output)
    options = SearchOptions(beam=args.beam, max_len_b=args.max_len_b)
    text, figures = plot_attention(translator, args.sentence, out, options)
    print(
        f"{text}\nnmt plot-attention: wrote {figures} PNG files and attention.json to {out}", file=sys.stderr
    )
    return 0
