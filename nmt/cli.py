"""The `nmt` command line. Each subcommand's arguments and code live in the module of its concept."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

from . import __version__
from .config import ConfigError, apply_overrides, parse_overrides, preset
from .config_file import load_model_config
from .errors import UserError

REPORT = (
    "this is a bug in nmt: please report it on the nmt issue tracker with the command line "
    "(rerun with --debug for the traceback)"
)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be a positive integer")
    return value


def model_config_from_args(args: argparse.Namespace, overrides: dict) -> "ModelConfig":  # noqa: F821
    cfg = load_model_config(args.config) if args.config else preset(args.preset, args.vocab_size)
    if args.config and args.vocab_size:
        cfg = apply_overrides(
            cfg, {"src_vocab_size": args.vocab_size, "tgt_vocab_size": args.vocab_size}, section="model"
        )
    return apply_overrides(cfg, overrides.get("model", {}), section="model")


def cmd_model_info(args: argparse.Namespace, overrides: dict) -> int:
    import torch

    from .config import to_dict
    from .model import Transformer
    from .parameter_counts import parameter_counts

    unknown = sorted(set(overrides) - {"model"})
    if unknown:
        raise ConfigError(f"--{unknown[0]}.*: model-info takes only --model.* overrides")
    cfg = model_config_from_args(args, overrides)
    with torch.device("meta"):  # no memory, no init time: shapes are enough to count
        model = Transformer(cfg)
    print("model configuration:")
    for k, v in to_dict(cfg).items():
        print(f"  {k:20s} {v}")
    print("parameters:")
    for k, v in parameter_counts(model).items():
        print(f"  {k:20s} {v:>13,d}  ({v / 1e6:.2f}M)")
    return 0


def add_score_args(parser: argparse.ArgumentParser) -> None:
    from sacrebleu.metrics import BLEU

    parser.add_argument("hyp", nargs="?", default="-", help="detokenized hypotheses (default: stdin)")
    parser.add_argument(
        "--ref",
        "-r",
        action="append",
        required=True,
        help="detokenized reference file (.gz ok); repeat for several references",
    )
    parser.add_argument(
        "--tokenize",
        "-tok",
        default="13a",
        choices=sorted(BLEU.TOKENIZERS),
        help="sacreBLEU tokenizer for BLEU (13a; zh for Chinese, ja-mecab, intl, ...)",
    )
    parser.add_argument(
        "--paper-bleu",
        action="store_true",
        help="also print the paper-era tokenized, compound-split BLEU, labelled",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")


def run_score(args: argparse.Namespace, overrides: dict) -> int:
    import sacrebleu

    from .data.lines import read_lines  # a DataError names the unreadable file or line
    from .metrics import PAPER_BLEU_LABEL, ScoreError, corpus_scores, paper_bleu

    if overrides:
        raise ScoreError(f"--{next(iter(overrides))}.*: score takes no configuration overrides")
    hyps = list(read_lines(args.hyp))
    refs = [list(read_lines(r)) for r in args.ref]
    for path, r in zip(args.ref, refs):
        if len(r) != len(hyps):
            raise ScoreError(
                f"line count mismatch: {args.hyp if args.hyp != '-' else '<stdin>'} has "
                f"{len(hyps)} lines but {path} has {len(r)}"
            )
    s = corpus_scores(hyps, refs, tokenize=args.tokenize)
    paper = paper_bleu(hyps, refs) if args.paper_bleu else None
    if args.format == "json":
        out = {
            "bleu": s.bleu,
            "bleu_signature": s.bleu_signature,
            "chrf": s.chrf,
            "chrf_signature": s.chrf_signature,
            "sacrebleu_version": sacrebleu.__version__,
        }
        if paper is not None:
            out["paper_bleu"] = {"score": paper, "label": PAPER_BLEU_LABEL}
        print(json.dumps(out, indent=2))
    else:
        print(f"{s.bleu_text}\n  signature: {s.bleu_signature}")
        print(f"{s.chrf_text}\n  signature: {s.chrf_signature}")
        if paper is not None:
            print(f"{PAPER_BLEU_LABEL} = {paper:.2f}")
    return 0


def add_model_info_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="base", help="base | big | small | tiny (default: base)")
    p.add_argument("--config", help="YAML/JSON file with a model: section")
    p.add_argument("--vocab-size", type=positive_int, help="shared vocabulary size (default: the preset's)")


# what `nmt --help` says of each subcommand
HELP = {
    "model-info": "print a model configuration and its parameter counts",
    "prepare": "clean, learn a shared BPE vocabulary, binarize a corpus",
    "train": "train a Transformer on a prepared DATA_DIR",
    "average": "average the last N checkpoints of a run (section 6.1)",
    "distill": "train a fast student on a teacher's translations (knowledge distillation), resumable",
    "translate": "translate raw text with a checkpoint (beam search, section 6.1)",
    "translate-shards": "translate a large input as a sharded, resumable job (local workers, Ray, SLURM)",
    "tune-alpha": "choose the length penalty alpha on a development set (section 6.1)",
    "calibrate": "fit a checkpoint's confidences on a validation set (confidence.json)",
    "shortlist": "vocabulary shortlist from prepared training data (translate --shortlist)",
    "export": "export a checkpoint to CTranslate2, Hugging Face (MarianMTModel) or Argos Translate",
    "import": "import a Hugging Face Marian (OPUS-MT), CTranslate2 or Argos Translate model as a checkpoint",
    "plot-attention": "heatmaps of every attention layer and head for one sentence",
    "serve": "HTTP API with dynamic batching and a web page (needs nmt[serve])",
    "score": "sacreBLEU BLEU and chrF (and opt-in paper-era tokenized BLEU)",
    "prepare-ptb": "`nmt prepare ptb`: Penn Treebank trees for parsing (section 6.3)",
    "parse": "parse sentences into trees with a parsing checkpoint (section 6.3)",
    "variations": "train the paper's Table 3 model variations, one run per row",
    "plot": "plot loss / perplexity / learning-rate curves of a run",
}


def commands() -> list[tuple[str, object, object]]:
    """Every subcommand as (name, add its arguments, run it), in the order of `nmt --help`; each
    layer's command-line module owns its arguments."""
    from .bulk import command as bulk
    from .data import command as data
    from .experiments import command as experiments
    from .export import command as export
    from .imports import command as imports
    from .infer import calibrate_command as calibrate
    from .infer import command as translate
    from .infer import plot_attention_command as plot_attention
    from .infer import shortlist_command as shortlist
    from .infer import tune_command as tune
    from .serve import command as serve
    from .train import command as train
    from .train import distill_command as distill
    from .train import plot_command as plot

    return [
        ("model-info", add_model_info_args, cmd_model_info),
        ("prepare", data.add_prepare_args, lambda args, overrides: data.run_prepare(args)),
        ("train", train.add_train_args, train.run_train),
        ("average", train.add_average_args, train.run_average),
        ("distill", distill.add_distill_args, distill.run_distill),
        ("translate", translate.add_translate_args, translate.run_translate),
        ("translate-shards", bulk.add_translate_shards_args, bulk.run_translate_shards),
        ("tune-alpha", tune.add_tune_alpha_args, tune.run_tune_alpha),
        ("calibrate", calibrate.add_calibrate_args, calibrate.run_calibrate),
        ("shortlist", shortlist.add_shortlist_args, shortlist.run_shortlist),
        ("export", export.add_export_args, export.run_export),
        ("import", imports.add_import_args, imports.run_import),
        ("plot-attention", plot_attention.add_plot_attention_args, plot_attention.run_plot_attention),
        ("serve", serve.add_serve_args, serve.run_serve),
        ("score", add_score_args, run_score),
        ("prepare-ptb", experiments.add_prepare_ptb_args, experiments.run_prepare_ptb),
        ("parse", experiments.add_parse_args, experiments.run_parse),
        ("variations", experiments.add_variations_args, experiments.run_variations),
        ("plot", plot.add_plot_args, plot.run_plot),
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nmt",
        description="Transformer neural machine translation (Vaswani et al., 2017).",
        epilog="Configuration overrides: --model.FIELD=VALUE (and --train.FIELD=VALUE for train).",
    )
    parser.add_argument("--version", action="version", version=f"nmt {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, add_args, run in commands():
        p = sub.add_parser(
            name, help=HELP[name], **({"prog": "nmt prepare ptb"} if name == "prepare-ptb" else {})
        )
        add_args(p)
        p.set_defaults(func=run)
        if name == "prepare-ptb":  # `nmt prepare ptb` is routed here (main)
            p.set_defaults(command="prepare ptb")
        # `nmt COMMAND ... --debug` works too
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["prepare", "ptb"]:  # `nmt prepare ptb` has its own arguments (nmt/experiments/command.py)
        argv = ["prepare-ptb", *argv[2:]]
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0

    try:
        overrides = parse_overrides(rest)
        if overrides and args.command not in ("model-info", "train", "distill"):
            raise ConfigError(f"{rest[0]}: unrecognised argument for `nmt {args.command}`")
        return args.func(args, overrides)
    except (UserError, FileNotFoundError) as e:  # nmt.errors: every layer's error a user can fix
        if args.debug:
            traceback.print_exc()
        print(f"nmt {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of stdout went away (`nmt score ... | head -1`): quietly,
        # as a Unix tool; stdout goes to /dev/null so that flushing it at exit raises nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a tool killed by it
    except KeyboardInterrupt:  # Ctrl-C (nmt train and nmt serve handle it themselves)
        if args.debug:
            traceback.print_exc()
        print(f"nmt {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except Exception as e:  # not a user error: one line and where to report it, unless --debug
        if args.debug:
            traceback.print_exc()
        print(f"nmt {args.command}: internal error: {type(e).__name__}: {e}; {REPORT}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
