"""Evaluation: sacreBLEU BLEU and chrF with their signatures (`nmt score`), and, opt-in, the
paper-era tokenized, compound-split BLEU.

sacreBLEU (Post, 2018) scores detokenized text with a fixed, reported tokenization; its
signature says exactly what was computed. The paper's 27.3 / 28.4 (EN-DE) are *tokenized* BLEU:
tensor2tensor's get_ende_bleu.sh tokenizes both sides (Moses tokenizer.perl), splits hyphenated
compounds with  perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'  and runs multi-bleu.perl.
`paper_bleu` reproduces that recipe with sacreBLEU's 13a tokenizer standing in for Moses (13a,
like Moses without -a, keeps a hyphen between letters attached, so the compound split applies),
the same regex, then BLEU on those tokens (tokenize='none', no smoothing, as multi-bleu.perl).
It is not comparable to sacreBLEU and is always printed with that label.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF

PAPER_BLEU_LABEL = "tokenized BLEU (paper-era, compound-split; not comparable to sacreBLEU)"
_COMPOUND = re.compile(r"(\S)-(\S)")  # get_ende_bleu.sh: s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g


class ScoreError(Exception):
    """A user-facing error of `nmt score` (unreadable file, line counts differ)."""


@dataclass
class Scores:
    bleu: float
    bleu_signature: str
    bleu_text: str  # sacreBLEU's own line: "BLEU = 27.31 58.3/33.1/20.6/13.3 (BP = ...)"
    chrf: float
    chrf_signature: str
    chrf_text: str


def corpus_scores(hyps: list[str], refs: list[list[str]], *, tokenize: str = "13a") -> Scores:
    """sacreBLEU corpus BLEU (with ``tokenize``) and chrF of ``hyps`` against reference streams
    ``refs`` (each a list as long as ``hyps``)."""
    for r in refs:
        if len(r) != len(hyps):
            raise ScoreError(f"{len(hyps)} hypotheses but a reference has {len(r)} lines")
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    b, c = bleu.corpus_score(hyps, refs), chrf.corpus_score(hyps, refs)
    return Scores(b.score, str(bleu.get_signature()), str(b), c.score, str(chrf.get_signature()), str(c))


def split_compounds(tokenized: str) -> str:
    """'rich-text format' -> 'rich ##AT##-##AT## text format' (non-overlapping, left to right,
    exactly as perl's s///g: 'a-b-c' -> 'a ##AT##-##AT## b-c')."""
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokenized)


def paper_tokenize(line: str) -> str:
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return split_compounds(Tokenizer13a()(line.strip()))


def paper_bleu(hyps: list[str], refs: list[list[str]]) -> float:
    """Tokenized, compound-split BLEU as in tensor2tensor's get_ende_bleu.sh (see module doc)."""
    tok_hyps = [paper_tokenize(h) for h in hyps]
    tok_refs = [[paper_tokenize(r) for r in stream] for stream in refs]
    return BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(tok_hyps, tok_refs).score


# ----------------------------------------------------------------------------- CLI
def read_lines(path: str) -> list[str]:
    """A plain or .gz UTF-8 file ("-" = stdin) as lines; errors name the file and line."""
    from .data.prepare import DataError, read_lines as data_read_lines

    try:
        return list(data_read_lines(path))
    except DataError as e:  # unreadable file or invalid UTF-8, named by the message
        raise ScoreError(str(e)) from None


def add_score_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("hyp", nargs="?", default="-", help="detokenized hypotheses (default: stdin)")
    parser.add_argument("--ref", "-r", action="append", required=True,
                        help="detokenized reference file (.gz ok); repeat for several references")
    parser.add_argument("--tokenize", "-tok", default="13a", choices=sorted(BLEU.TOKENIZERS),
                        help="sacreBLEU tokenizer for BLEU (13a; zh for Chinese, ja-mecab, intl, ...)")
    parser.add_argument("--paper-bleu", action="store_true",
                        help="also print the paper-era tokenized, compound-split BLEU, labelled")
    parser.add_argument("--format", choices=("text", "json"), default="text")


def run_score(args: argparse.Namespace, overrides: dict) -> int:
    if overrides:
        raise ScoreError(f"--{next(iter(overrides))}.*: score takes no configuration overrides")
    hyps = read_lines(args.hyp)
    refs = [read_lines(r) for r in args.ref]
    for path, r in zip(args.ref, refs):
        if len(r) != len(hyps):
            raise ScoreError(f"line count mismatch: {args.hyp if args.hyp != '-' else '<stdin>'} has "
                             f"{len(hyps)} lines but {path} has {len(r)}")
    s = corpus_scores(hyps, refs, tokenize=args.tokenize)
    paper = paper_bleu(hyps, refs) if args.paper_bleu else None
    if args.format == "json":
        out = {"bleu": s.bleu, "bleu_signature": s.bleu_signature, "chrf": s.chrf,
               "chrf_signature": s.chrf_signature, "sacrebleu_version": sacrebleu.__version__}
        if paper is not None:
            out["paper_bleu"] = {"score": paper, "label": PAPER_BLEU_LABEL}
        print(json.dumps(out, indent=2))
    else:
        print(f"{s.bleu_text}\n  signature: {s.bleu_signature}")
        print(f"{s.chrf_text}\n  signature: {s.chrf_signature}")
        if paper is not None:
            print(f"{PAPER_BLEU_LABEL} = {paper:.2f}")
    return 0
