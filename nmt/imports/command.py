"""The command line of `nmt import`: its arguments and its run over nmt.imports.from_marian,
nmt.imports.from_ctranslate2 and nmt.imports.from_argos. User errors are ModelImportError, which `nmt`
prints as one line (exit 2); nothing is written then.
"""

from __future__ import annotations

import argparse

from .from_argos import import_argos
from .from_ctranslate2 import import_ctranslate2
from .from_marian import import_huggingface


def add_import_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "format",
        choices=("huggingface", "ctranslate2", "argos"),
        help="huggingface: a MarianMTModel directory (OPUS-MT; or a Hub id, with internet); "
        "ctranslate2: a CTranslate2 model directory; argos: an Argos Translate package (.argosmodel)",
    )
    parser.add_argument("source", help="the model directory, Hub id or .argosmodel file")
    parser.add_argument("out_dir", help="the nmt checkpoint to write (a new or empty directory)")
    parser.add_argument(
        "--spm-model",
        default=None,
        help="ctranslate2: the SentencePiece model of its vocabulary (default: SOURCE/spm.model)",
    )
    parser.add_argument(
        "--source-eos",
        choices=("yes", "no"),
        default=None,
        help="ctranslate2: whether sources end with </s> (default: its config.json's add_source_eos; "
        "yes for a model converted from transformers, whose tokenizer adds </s>)",
    )


def run_import(args: argparse.Namespace, overrides: dict) -> int:
    if args.format != "ctranslate2" and (args.spm_model or args.source_eos):
        from .imported import ModelImportError

        raise ModelImportError("--spm-model and --source-eos apply to ctranslate2 imports only")
    if args.format == "huggingface":
        out = import_huggingface(args.source, args.out_dir)
    elif args.format == "argos":
        out = import_argos(args.source, args.out_dir)
    else:
        eos = None if args.source_eos is None else args.source_eos == "yes"
        out = import_ctranslate2(args.source, args.out_dir, spm_model=args.spm_model, source_eos=eos)
    print(f"nmt import: wrote {out} (translate: nmt translate {out}; fine-tune: docs/importing.md)")
    return 0
