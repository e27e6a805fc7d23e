"""The command line of `nmt export`: its arguments and its run over nmt.export.ctranslate2,
nmt.export.huggingface, nmt.export.argos and nmt.export.onnx. User errors are
ExportError, which `nmt` prints as one line (nmt/cli.py).
"""

from __future__ import annotations

import argparse

from ..checkpoint import CheckpointError
from .argos import export_argos
from .ctranslate2 import QUANTIZATIONS, ExportError, export_ctranslate2
from .huggingface import export_huggingface
from .onnx import export_onnx


def add_export_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "format",
        choices=("ctranslate2", "huggingface", "argos", "onnx"),
        help="ctranslate2: a CTranslate2 model directory; huggingface: MarianMTModel + tokenizer; "
        "argos: an Argos Translate package (OUT.argosmodel) for argostranslate and LibreTranslate; "
        "onnx: encoder.onnx, the cached decoder_step.onnx and the full-prefix decoder.onnx for ONNX Runtime",
    )
    parser.add_argument("checkpoint", help="checkpoint directory or run directory")
    parser.add_argument(
        "out_dir",
        help="output directory: new, empty, or an earlier export (replaced atomically); argos: the "
        ".argosmodel file (new, or an earlier export: replaced atomically)",
    )
    parser.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="ctranslate2 and argos: weight quantization (default: float32)",
    )
    parser.add_argument(
        "--no-shortlist",
        action="store_true",
        help="ctranslate2: leave out the checkpoint's own shortlist (shortlist.txt beside its weights), "
        "which is otherwise exported as the model's vocabulary map, vmap.txt",
    )
    parser.add_argument("--package-version", default="1.0", help="argos: the package's version (default 1.0)")
    parser.add_argument(
        "--languages",
        metavar="SRC-TGT",
        default=None,
        help="argos: the package's language codes, e.g. en-de (default: the checkpoint's data's)",
    )


def run_export(args: argparse.Namespace, overrides: dict) -> int:
    try:
        if args.no_shortlist and args.format != "ctranslate2":
            raise ExportError("--no-shortlist applies to ctranslate2 exports only")
        if args.format == "ctranslate2":
            out = export_ctranslate2(
                args.checkpoint,
                args.out_dir,
                quantization=args.quantization,
                own_shortlist=not args.no_shortlist,
            )
        elif args.format == "argos":
            languages = None
            if args.languages is not None:
                src, _, tgt = args.languages.partition("-")
                if not src or not tgt:
                    raise ExportError(f"--languages {args.languages!r}: give SRC-TGT, e.g. en-de")
                languages = (src, tgt)
            out = export_argos(
                args.checkpoint,
                args.out_dir,
                quantization=args.quantization,
                version=args.package_version,
                languages=languages,
            )
            print(f"nmt export: wrote {out} (argostranslate.package.install_from_path; see docs/exports.md)")
            return 0
        elif args.format == "onnx":
            if args.quantization:
                raise ExportError("--quantization applies to ctranslate2 and argos exports only")
            out = export_onnx(args.checkpoint, args.out_dir)
        else:
            if args.quantization:
                raise ExportError("--quantization applies to ctranslate2 and argos exports only")
            out = export_huggingface(args.checkpoint, args.out_dir)
    except CheckpointError as e:
        raise ExportError(str(e)) from None
    print(f"nmt export: wrote {out} (see {out}/README.md)")
    return 0
