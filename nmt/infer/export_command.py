"""The command line of `nmt export`: its arguments and its run over nmt.infer.export_ctranslate2 and
nmt.infer.export_huggingface. User errors are ExportError, which `nmt` prints as one line
(nmt/cli.py).
"""

from __future__ import annotations

import argparse

from ..checkpoint import CheckpointError
from .export_ctranslate2 import QUANTIZATIONS, ExportError, export_ctranslate2
from .export_huggingface import export_huggingface


def add_export_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "format",
        choices=("ctranslate2", "huggingface"),
        help="ctranslate2: a CTranslate2 model directory; huggingface: MarianMTModel + tokenizer",
    )
    parser.add_argument("checkpoint", help="checkpoint directory or run directory")
    parser.add_argument(
        "out_dir", help="output directory: new, empty, or an earlier export (replaced atomically)"
    )
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="ctranslate2 only: weight quantization (default: float32)",
    )


def run_export(args: argparse.Namespace, overrides: dict) -> int:
    try:
        if args.format == "ctranslate2":
            out = export_ctranslate2(args.checkpoint, args.out_dir, quantization=args.quantization)
        else:
            if args.quantization:
                raise ExportError("--quantization applies to ctranslate2 exports only")
            out = export_huggingface(args.checkpoint, args.out_dir)
    except CheckpointError as e:
        raise ExportError(str(e)) from None
    print(f"nmt export: wrote {out} (see {out}/README.md)")
    return 0
