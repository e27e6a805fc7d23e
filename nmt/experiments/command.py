"""`nmt prepare ptb`, `nmt parse` and `nmt variations`: the command-line front of the paper's other
experiments (section 6.3's constituency parsing, Table 3's model variations). The experiments themselves
live in `parsing.py`, `trees.py`, `evalb.py` and `variations.py`; this module only parses arguments,
checks them and calls them."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..atomic import write_text
from ..checkpoint import load_model, read_config, resolve_checkpoint
from ..config import ConfigError, apply_overrides
from ..data.download import DataError
from ..infer.options import SearchOptions
from ..infer.translate import read_text_lines
from ..train.command import build_configs
from ..vocab import load_spm
from . import evalb
from .parsing import ALPHA, BEAM, FORMS, MAX_LEN_B, Linearisation, parse_sentences, prepare_ptb
from .trees import LEAF_KINDS, Tree, parse_brackets
from .variations import (
    DEFAULT_BASE,
    TABLE3_BASE_DROPOUT,
    row_configs,
    run_row,
    select_rows,
    table3_rows,
    write_table,
)


def add_prepare_ptb_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--treebank",
        help="folder of wsj_*.mrg files or its .tar.gz (default: $NMT_DATA_DIR/ptb_sample/combined.tar.gz)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output DATA_DIR")
    parser.add_argument(
        "--min-count", type=int, default=2, help="keep training words seen this often (default 2)"
    )
    parser.add_argument("--force", action="store_true", help="replace DIR if it exists")
    parser.add_argument(
        "--leaves",
        choices=LEAF_KINDS,
        default=None,
        help="how a word is linearised: xx (the paper's, default), pos (its POS tag) or "
        "words (the word itself); see results/ptb-parse/README.md",
    )
    parser.add_argument("--pos-tags", action="store_true", help="the same as --leaves pos")
    parser.add_argument(
        "--copy-pairs",
        action="store_true",
        help="also train on a copy of every training sentence (words + <s> -> words), which "
        "teaches the positional alignment a --form per-word parser needs (not the paper's)",
    )
    parser.add_argument(
        "--form",
        choices=FORMS,
        default="brackets",
        help="brackets (the paper's bracket sequence, default) or per-word (one token per "
        "word: the brackets it opens, XX, how many close after it; not the paper's)",
    )


def run_prepare_ptb(args: argparse.Namespace, overrides: dict) -> int:
    if args.min_count < 1:
        raise DataError("--min-count: must be >= 1")
    treebank = args.treebank
    if treebank is None:
        if not os.environ.get("NMT_DATA_DIR"):
            raise DataError(
                "--treebank PATH is required (or set NMT_DATA_DIR to a folder holding ptb_sample/)"
            )
        treebank = Path(os.environ["NMT_DATA_DIR"]) / "ptb_sample" / "combined.tar.gz"
        if not treebank.exists():
            raise DataError(f"{treebank}: no such file (NMT_DATA_DIR); pass --treebank PATH")
    if args.pos_tags and args.leaves not in (None, "pos"):
        raise DataError(f"--pos-tags contradicts --leaves {args.leaves}")
    leaf = "pos" if args.pos_tags else args.leaves or "xx"
    prepare_ptb(
        treebank,
        args.out,
        min_count=args.min_count,
        force=args.force,
        leaf=leaf,
        form=args.form,
        copy_pairs=args.copy_pairs,
    )
    print(f"wrote {args.out}")
    return 0


class DeprecatedFlag(argparse.Action):
    """An old spelling of a flag, hidden from --help: sets ``dest`` as the ``new`` flag does, with a
    one-line warning on stderr naming the new spelling."""

    def __init__(self, option_strings, dest, *, new: str, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: warning: {option_string} is deprecated, use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, True)


def add_parse_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", help="checkpoint or run directory trained on `nmt prepare ptb` data")
    parser.add_argument(
        "-i", "--input", default="-", help="tokenised sentences, one per line (default: stdin)"
    )
    parser.add_argument("-o", "--output", default="-", help="trees, one per line (default: stdout)")
    parser.add_argument(
        "--gold", help="gold trees (one per line, e.g. DATA_DIR/test.gold.txt): also print F1"
    )
    parser.add_argument("--beam", type=int, default=BEAM, help="beam size (paper, 6.3: 21)")
    parser.add_argument("--alpha", type=float, default=ALPHA, help="length penalty (paper, 6.3: 0.3)")
    parser.add_argument(
        "--max-len-b", type=int, default=MAX_LEN_B, help="max output length input + B (paper: 300)"
    )
    parser.add_argument(
        "--well-formed",
        action="store_true",
        help="search only well-formed trees with one leaf per word (not the paper's: "
        "it repaired whatever the search wrote)",
    )
    parser.add_argument(
        "--constrain", dest="well_formed", action=DeprecatedFlag, new="--well-formed", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--max-open-run",
        type=int,
        default=None,
        help="with --well-formed: most opening brackets in a row (default: the training "
        "trees' maximum, from the checkpoint's data)",
    )
    parser.add_argument(
        "--max-depth",
        type=int,
        default=None,
        help="with --well-formed: greatest tree depth (default: the training trees' maximum)",
    )
    parser.add_argument("--device", default=None)


def run_parse(args: argparse.Namespace, overrides: dict) -> int:
    """`nmt parse`: the sentences (and --gold trees) read, the checkpoint loaded, the trees searched
    and written, how many needed repair (and the labelled bracket scores) on stderr."""
    lines = read_text_lines(args.input)
    gold = read_gold_trees(args.gold, sentences=[line.split() for line in lines]) if args.gold else None
    model, _ = load_model(args.checkpoint, device=args.device or "cpu")
    directory = resolve_checkpoint(args.checkpoint)
    ptb_meta = (read_config(directory).get("data") or {}).get("ptb") or {}
    sp = load_spm(directory)
    limits = well_formed_limits(args, ptb_meta)
    start = time.time()
    trees, repaired = parse_sentences(
        model,
        sp,
        [line.split() for line in lines],
        SearchOptions(beam=args.beam, alpha=args.alpha, max_len_b=args.max_len_b),
        device=args.device,
        linearisation=Linearisation(ptb_meta.get("form", "brackets"), leaves=word_leaves(ptb_meta)),
        well_formed=args.well_formed,
        limits=limits,
    )
    write_trees(args.output, trees)
    print(
        f"parsed {len(trees)} sentences in {time.time() - start:.1f} s; {repaired} outputs repaired",
        file=sys.stderr,
    )
    if gold is not None:
        s = evalb.score(gold, trees)
        print(
            f"labelled bracket (EVALB COLLINS.prm): P {s.precision:.2f} R {s.recall:.2f} F1 {s.f1:.2f} "
            f"({s.matched} matched, {s.gold} gold, {s.test} test brackets)",
            file=sys.stderr,
        )
    return 0


def read_gold_trees(path: str, *, sentences: list[list[str]]) -> list[Tree]:
    """--gold: one tree per non-empty line, as many as input ``sentences`` (their words), tree i
    over as many words as sentence i; DataError naming the file and line otherwise."""
    gold = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            trees = parse_brackets(line)
        except (ValueError, IndexError) as e:
            raise DataError(f"{path}: line {n}: {str(e).removeprefix('line 1: ')}") from None
        if len(trees) != 1:
            raise DataError(f"{path}: line {n}: {len(trees)} trees, one per line expected")
        if len(gold) < len(sentences) and len(trees[0].words()) != len(sentences[len(gold)]):
            raise DataError(
                f"{path}: line {n}: {len(trees[0].words())} words, input sentence {len(gold) + 1} "
                f"has {len(sentences[len(gold)])}"
            )
        gold.append(trees[0])
    if len(gold) != len(sentences):
        raise DataError(f"{path}: {len(gold)} trees for {len(sentences)} input sentences")
    return gold


def word_leaves(ptb_meta: dict) -> frozenset[str] | None:
    """The tokens that stand for a word in the checkpoint's linearisation (meta.json "ptb"): None
    for --leaves words (every non-bracket token); XX for data prepared before --pos-tags."""
    if ptb_meta.get("leaf") == "words":
        return None
    return frozenset(ptb_meta.get("leaves") or ["XX"])


def well_formed_limits(args: argparse.Namespace, ptb_meta: dict) -> dict:
    """--max-open-run and --max-depth, by default the training trees' (meta.json "ptb")."""
    limits = {
        k: getattr(args, k) if getattr(args, k) is not None else ptb_meta.get(k)
        for k in ("max_open_run", "max_depth")
    }
    for k, v in limits.items():
        if v is not None and v < 1:
            raise DataError(f"--{k.replace('_', '-')}: must be >= 1")
    return limits


def write_trees(path: str, trees: list[Tree]) -> None:
    """One tree per line to ``path`` (written whole: `atomic.write_text`) or stdout ("-")."""
    text = "".join(f"{t}\n" for t in trees)
    if path == "-":
        sys.stdout.write(text)
    else:
        write_text(path, text)


def add_variations_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data_dir", help="a directory written by `nmt prepare`")
    parser.add_argument("--out", required=True, help="RUN_ROOT: one run directory per row, and the table")
    parser.add_argument("--rows", help="letters (A,B,C,D,E,F) or row names (A1,C3); default: every row")
    budget = parser.add_mutually_exclusive_group()  # one is required unless --list
    budget.add_argument("--steps", type=int, help="updates per row (the same for every row)")
    budget.add_argument("--minutes", type=float, help="training minutes per row")
    parser.add_argument(
        "--base-config",
        default=str(DEFAULT_BASE),
        help="YAML with model:/train: sections (default: recipes/multi30k-en-de.yaml)",
    )
    parser.add_argument("--windows", default="2,4", help="row F's attention windows r (default: 2,4)")
    parser.add_argument("--warmup-steps", type=int, help="override the base's warm-up (short budgets)")
    parser.add_argument("--dev-sentences", type=int, default=0, help="dev BLEU on the first N (0 = all)")
    parser.add_argument("--device", help="cpu, cuda ... (default: cuda if available)")
    parser.add_argument("--list", action="store_true", help="print the rows and their changes, train nothing")


def run_variations(args: argparse.Namespace, overrides: dict) -> int:
    data_dir, out = Path(args.data_dir), Path(args.out)
    if not args.list and args.steps is None and args.minutes is None:
        raise ConfigError("nmt variations: give the budget per row, --steps S or --minutes M")
    if (args.steps is not None and args.steps <= 0) or (args.minutes is not None and args.minutes <= 0):
        raise ConfigError("--steps/--minutes: must be positive")
    try:
        windows = tuple(int(x) for x in args.windows.split(","))
    except ValueError:
        raise ConfigError(f"--windows={args.windows!r}: expected integers like 2,4") from None
    model_cfg, train_cfg, meta = build_configs(
        data_dir, preset_name=None, config_file=args.base_config, overrides={}
    )
    if Path(args.base_config).resolve() == DEFAULT_BASE:
        model_cfg = apply_overrides(model_cfg, {"dropout": str(TABLE3_BASE_DROPOUT)}, section="model")
    if args.warmup_steps:
        train_cfg = apply_overrides(train_cfg, {"warmup_steps": str(args.warmup_steps)}, section="train")
    rows = select_rows(table3_rows(model_cfg, windows=windows), args.rows)
    for row in rows:  # every row's configuration is valid before any row trains
        try:
            row_configs(model_cfg, train_cfg, row, steps=args.steps or 0, minutes=args.minutes or 0.0)
        except ConfigError as e:
            changes = " ".join(f"{k} {v}" for k, v in (("model", row.model), ("train", row.train)) if v)
            raise ConfigError(f"row {row.name} ({changes}): {e}") from None
    if args.list:
        print(
            f"base: {args.base_config}, N={model_cfg.n_layers} d_model={model_cfg.d_model} "
            f"d_ff={model_cfg.d_ff} h={model_cfg.n_heads} P_drop={model_cfg.dropout} "
            f"eps_ls={train_cfg.label_smoothing}"
        )
        for r in rows:
            print(f"{r.name:5s} model {r.model or '-'} train {r.train or '-'}")
        return 0
    out.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        print(f"nmt variations: {message}", flush=True)
        with open(out / "variations.log", "a") as f:
            f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")

    results = []
    for row in rows:
        run_dir = out / row.name
        result_path = run_dir / "result.json"
        if result_path.exists():
            results.append(json.loads(result_path.read_text()))
            log(f"{row.name}: finished earlier, skipped")
            continue
        m, t = row_configs(model_cfg, train_cfg, row, steps=args.steps or 0, minutes=args.minutes or 0.0)
        log(f"{row.name}: training with model {row.model or '-'} train {row.train or '-'}")
        result = run_row(
            data_dir, run_dir, m, t, meta, dev_sentences=args.dev_sentences, device=args.device, log=log
        )
        write_text(result_path, json.dumps(result, indent=2) + "\n")
        results.append(result)
        write_table(results, out)
    write_table(results, out)
    print((out / "table3.md").read_text(), end="")
    return 0
