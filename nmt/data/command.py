"""`nmt prepare` from the command line: its arguments, their checks, fetching or locating the
corpus (nmt.data.download), then nmt.data.prepare.prepare and its report."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from . import download as dl
from .bpe import WMT14_EN_FR_VOCAB
from .download import DataError
from .memories import MARKUP, gather_split, memory_format
from .multilingual import MULTIPLE, merge_tagged, target_langs
from .prepare import DATASETS, SPLITS, PrepareOptions, format_report, prepare


def add_prepare_args(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("dataset", choices=DATASETS)
    p.add_argument("--src", required=True, metavar="LANG", help="source language code, e.g. en")
    p.add_argument(
        "--tgt",
        required=True,
        metavar="LANG",
        help="target language code, e.g. de; several (de,fr,cs): one corpus per target, each source "
        "tagged >>de<< etc. for one multi-target model (files: write {tgt} in the --train/--valid/--test "
        "paths where the target's code goes)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        metavar="N",
        help="shared BPE vocabulary size (default: 8000 multi30k, 37000 wmt14 "
        "en-de, 32000 wmt14 en-fr, else by train size)",
    )
    inputs = (
        "SRC TGT (two text files aligned by line) or one translation memory (.tmx, .xlf/.xliff, .po, "
        ".tsv; .gz too); given again, the inputs are concatenated"
    )
    p.add_argument(
        "--train",
        nargs="+",
        action="append",
        metavar="FILE",
        help=f"training data (files; wmt14, wmt17-zh-en: instead of the downloaded train.*): {inputs}",
    )
    p.add_argument("--valid", nargs="+", action="append", metavar="FILE", help="as --train")
    p.add_argument("--test", nargs="+", action="append", metavar="FILE", help="as --train")
    p.add_argument(
        "--memory-markup",
        choices=MARKUP,
        default="tags",
        help="inline markup of TMX / XLIFF segments: tags (default: kept as tags, an XML fragment as "
        "nmt's markup pipeline reads it) or text (the text alone)",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="folder with local copies (multi30k/, wmt14_en_de/, wmt14_en_fr/, "
        "wmt17_zh_en/, libreoffice_help/); downloads go there "
        "too (default: $NMT_DATA_DIR, else ~/.cache/nmt/data)",
    )
    p.add_argument(
        "--base-url", default=None, help="replace the download base URL (mirror; default: $NMT_BASE_URL)"
    )
    p.add_argument(
        "--max-len",
        type=int,
        default=PrepareOptions.max_len,
        help="train only: drop pairs with a side longer than this many pieces",
    )
    p.add_argument(
        "--max-ratio",
        type=float,
        default=PrepareOptions.max_ratio,
        help="train only: drop pairs whose piece-length ratio exceeds this",
    )
    p.add_argument(
        "--character-coverage",
        type=float,
        default=None,
        help="SentencePiece character coverage (default: 0.9995 if zh/ja/ko, else 1)",
    )
    p.add_argument(
        "--input-sentence-size",
        type=int,
        default=PrepareOptions.input_sentence_size,
        help="max sentences sampled to train SentencePiece",
    )
    p.add_argument(
        "--bpe-dropout",
        type=float,
        default=0.0,
        metavar="P",
        help="not in the paper: also write --bpe-dropout-copies sampled segmentations "
        "of train, each BPE merge skipped with probability P (BPE-dropout, "
        "Provilkov et al. 2020; 0.1 there); training uses one per epoch",
    )
    p.add_argument(
        "--bpe-dropout-copies",
        type=int,
        default=None,
        metavar="K",
        help="how many sampled segmentations (default 10 with --bpe-dropout)",
    )
    p.add_argument(
        "--case-augment",
        type=float,
        default=0.0,
        metavar="P",
        help="not in the paper: rewrite each train pair with probability P in ALL CAPS or (as "
        "likely) Title Case, both sides, before learning the vocabulary (Marian's --all-caps-every, "
        "OpusTrainer's UpperCase/TitleCase); default 0: off",
    )
    p.add_argument(
        "--spm-model",
        default=None,
        metavar="FILE",
        help="reuse this SentencePiece model (an earlier prepare's DATA_DIR or its "
        "spm.model) instead of learning one: the same vocabulary id for id, for "
        "ensembles or fine-tuning across data sets (e.g. distilled targets)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=min(os.cpu_count() or 1, 8))
    p.add_argument("--force", action="store_true", help="replace DIR if it exists")


def run_prepare(args: argparse.Namespace) -> int:
    """`nmt prepare`: the options checked, the corpus fetched or located, prepared, reported."""
    copies = check_prepare_args(args)
    langs = target_langs(args.tgt) if "," in args.tgt else []
    if args.src in langs:
        raise DataError(f"--src {args.src} is also one of --tgt {args.tgt}")
    with tempfile.TemporaryDirectory(prefix=".nmt-prepare-tagged-") as tagged_dir:
        if langs:  # one corpus per target, their sources tagged, concatenated
            splits, downloads, sources = {}, {}, {}
            for lang in langs:
                found_splits, found = locate_corpus(for_target(args, lang))
                folder = Path(tagged_dir) / f"inputs-{lang}"
                splits[lang], sources[lang] = gather_inputs(found_splits, folder, args, tgt=lang)
                downloads.update(found)
            splits = merge_tagged(splits, Path(tagged_dir))
            sources = {lang: s for lang, s in sources.items() if s}
        else:
            splits, downloads = locate_corpus(args)
            splits, sources = gather_inputs(splits, Path(tagged_dir), args, tgt=args.tgt)
        for rel, digest in downloads.items():
            print(f"{'verified' if args.dataset == 'libreoffice' else 'downloaded'} {rel}: sha256 {digest}")
        options = prepare_options(args, bpe_dropout_copies=copies, tgt_langs=tuple(langs))
        meta = prepare(
            splits, args.out, options=options, downloads=downloads, sources=sources or None, force=args.force
        )
    print(format_report(meta))
    print(f"wrote {args.out}")
    return 0


def check_prepare_args(args: argparse.Namespace) -> int:
    """DataError for options that contradict each other or name no file; returns the number of
    BPE-dropout copies (--bpe-dropout-copies, by default 10 with --bpe-dropout, else 0)."""
    if args.src == args.tgt:
        raise DataError(f"--src and --tgt are the same language ({args.src})")
    copies = args.bpe_dropout_copies
    if copies is None:
        copies = 10 if args.bpe_dropout > 0 else 0
    if not 0.0 <= args.bpe_dropout < 1.0 or copies < 0 or bool(copies) != bool(args.bpe_dropout):
        raise DataError(
            f"--bpe-dropout {args.bpe_dropout} --bpe-dropout-copies {copies}: need "
            "0 < P < 1 and K >= 1 (or P = 0 and no copies)"
        )
    if not 0.0 <= args.case_augment <= 1.0:
        raise DataError(f"--case-augment {args.case_augment}: must be in [0, 1] (a share of the train pairs)")
    if args.spm_model is not None and (args.vocab_size is not None or args.character_coverage is not None):
        raise DataError("--spm-model reuses a vocabulary: --vocab-size and --character-coverage do not apply")
    if args.vocab_size is not None and args.vocab_size < 1:
        raise DataError(f"--vocab-size {args.vocab_size}: must be a positive number of pieces")
    for split in SPLITS:
        for paths in getattr(args, split) or ():
            if len(paths) > 2 or (len(paths) == 1 and memory_format(paths[0]) is None):
                raise DataError(
                    f"--{split} {' '.join(paths)}: give SRC TGT (two text files) or one translation memory "
                    "(.tmx, .xlf, .xliff, .po, .tsv, optionally .gz)"
                )
            for path in paths:
                if Path(path).exists() and not Path(path).is_file():
                    raise DataError(f"--{split} {path}: not a regular file")
    return copies


def for_target(args: argparse.Namespace, lang: str) -> argparse.Namespace:
    """The arguments of one target of several: --tgt LANG, and {tgt} in the file paths replaced."""
    one = argparse.Namespace(**vars(args))
    one.tgt = lang
    for split in SPLITS:
        for paths in getattr(args, split) or ():
            if len(paths) == 2 and not any("{tgt}" in p for p in paths):  # a memory holds every language
                raise DataError(
                    f"--{split} {' '.join(paths)}: with several targets (--tgt {args.tgt}) write {{tgt}} "
                    "where each target's code goes, e.g. --train train.en-{tgt}.en train.en-{tgt}.{tgt}"
                )
        inputs = [[p.replace("{tgt}", lang) for p in paths] for paths in getattr(args, split) or ()]
        setattr(one, split, inputs or None)
    return one


def locate_corpus(args: argparse.Namespace) -> tuple[dict, dict]:
    """The inputs of each split: the given --train/--valid/--test (a list of inputs, each SRC TGT or
    one memory), and for a named data set its (src, tgt) files under --data-dir (downloaded and
    verified where needed); and the sha256 of each downloaded or verified file (meta.json["downloads"])."""
    src, tgt = args.src, args.tgt
    root = Path(args.data_dir or os.environ.get("NMT_DATA_DIR") or Path.home() / ".cache" / "nmt" / "data")
    given = {s: [tuple(p) for p in getattr(args, s)] for s in SPLITS if getattr(args, s)}
    if args.dataset == "files":
        if "train" not in given:
            raise DataError("`files` needs --train SRC TGT (and usually --valid, --test)")
        return given, {}
    if args.dataset in ("multi30k", "libreoffice") and given:  # their splits are fixed: not replaced
        raise DataError(
            f"--{next(iter(given))}: {args.dataset} brings its own splits; for other files use "
            "`nmt prepare files`"
        )
    if args.dataset == "multi30k":
        return dl.fetch_multi30k(root, (src, tgt), base_url=args.base_url)
    if args.dataset == "libreoffice":  # local only; `downloads` records the verified digests
        return dl.locate_libreoffice(root, (src, tgt))
    wanted = tuple(s for s in SPLITS if s not in given)
    if args.dataset == "wmt14":
        splits, downloads = dl.fetch_wmt14(root, (src, tgt), base_url=args.base_url, splits=wanted)
    else:
        splits, downloads = dl.fetch_wmt(
            root, dl.WMT17_ZH_EN, (src, tgt), base_url=args.base_url, splits=wanted
        )
    splits.update(given)
    return splits, downloads


def gather_inputs(
    splits: dict, folder: Path, args: argparse.Namespace, *, tgt: str
) -> tuple[dict[str, tuple[Path, Path]], dict[str, list[dict]]]:
    """Each split's (src, tgt) files: its one SRC TGT input as it is; else its inputs (memories read
    for --src and ``tgt``, text pairs) concatenated into two files under ``folder``; and what each
    gathered split was made of (meta.json["sources"])."""
    out, sources = {}, {}
    for split, inputs in splits.items():
        if not isinstance(inputs, list):  # a named data set's (src, tgt) files
            out[split] = (Path(inputs[0]), Path(inputs[1]))
        elif len(inputs) == 1 and len(inputs[0]) == 2:
            out[split] = (Path(inputs[0][0]), Path(inputs[0][1]))
        else:
            folder.mkdir(parents=True, exist_ok=True)
            out[split] = (folder / f"{split}.src", folder / f"{split}.tgt")
            sources[split] = gather_split(
                inputs, out[split], langs=(args.src, tgt), markup=args.memory_markup
            )
            for record in sources[split]:
                print(f"{split}: {record['pairs']} pairs from {record.get('memory') or record['src']}")
    return out, sources


def prepare_options(
    args: argparse.Namespace, *, bpe_dropout_copies: int, tgt_langs: tuple[str, ...] = ()
) -> PrepareOptions:
    """The recipe of `nmt prepare`'s options (the vocabulary size of WMT14 en-fr is the paper's);
    with several targets ``tgt_langs``, the target language is "mul"."""
    vocab_size = args.vocab_size
    if vocab_size is None and args.dataset == "wmt14" and "fr" in (args.src, args.tgt):
        vocab_size = WMT14_EN_FR_VOCAB
    return PrepareOptions(
        dataset=args.dataset,
        src_lang=args.src,
        tgt_lang=MULTIPLE if tgt_langs else args.tgt,
        tgt_langs=tgt_langs,
        vocab_size=vocab_size,
        max_len=args.max_len,
        max_ratio=args.max_ratio,
        character_coverage=args.character_coverage,
        input_sentence_size=args.input_sentence_size,
        seed=args.seed,
        threads=args.threads,
        shuffle_train=args.dataset == "libreoffice",  # its lines are in page order
        bpe_dropout=args.bpe_dropout,
        bpe_dropout_copies=bpe_dropout_copies,
        spm_model=args.spm_model,
        case_augment=args.case_augment,
    )
