"""`nmt tune-alpha`: choose the length penalty alpha on a development set, as the paper did.

Section 6.1: "We used beam search with a beam size of 4 and length penalty alpha = 0.6. These
hyperparameters were chosen after experimentation on the development set." The paper's 0.6 was
chosen for WMT with 25k-token batches and 100k steps; a small model trained for minutes on another
corpus often writes shorter outputs (brevity penalty < 1), and the alpha that fixes that is
found the same way: translate the development set with each alpha of a grid (beam search is
rerun, not rescored: alpha changes which hypotheses survive the exact early termination) and keep
the one with the highest corpus BLEU. Ties keep the alpha nearest the paper's 0.6.

The test set must not take part: tune on valid, then translate test once with the chosen alpha.
With ``--mbr`` each alpha's output is the minimum-Bayes-risk choice among the beam's n-best
(nmt.infer.mbr), so that alpha is chosen for the decoding that will be used.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass

PAPER_ALPHA = 0.6
DEFAULT_ALPHAS = (0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6)


@dataclass
class AlphaRow:
    alpha: float
    bleu: float
    brevity_penalty: float
    chrf: float
    hyp_len: int
    ref_len: int
    rerank_weight: float | None = None  # with rerank: the rescoring models' weight (nmt.infer.rerank)


def tune_alpha(translator, sources: list[str], references: list[str], *, alphas=DEFAULT_ALPHAS,
               beam: int = 4, tokenize: str = "13a", batch_tokens: int = 2048, max_len_a: float = 1.0,
               max_len_b: int = 50, on_alpha=None, mbr=None, rerank=None,
               rerank_weights=(0.5,)) -> tuple[float, list[AlphaRow]]:
    """Translate ``sources`` with each alpha and score against ``references`` (sacreBLEU, the
    ``tokenize`` of `nmt score`). Returns (best alpha, one row per alpha in the given order);
    ``on_alpha(row)`` is called after each. ``mbr`` (nmt.infer.mbr.MBR): MBR outputs.
    ``rerank`` (nmt.infer.rerank.Rerank; its weight is ignored): one row per alpha and weight of
    ``rerank_weights``, the beam's n-best searched and rescored once per alpha; the best row's
    weight is then in ``best_row(rows).rerank_weight``."""
    from sacrebleu.metrics import BLEU, CHRF

    from .translate import TranslateError

    if len(sources) != len(references):
        raise TranslateError(f"{len(sources)} source lines but {len(references)} reference lines")
    if not alphas:
        raise TranslateError("no alpha to try")
    rows = []

    def add(hyps: list[str], alpha: float, weight: float | None = None) -> None:
        bleu = BLEU(tokenize=tokenize).corpus_score(hyps, [references])
        chrf = CHRF().corpus_score(hyps, [references])
        row = AlphaRow(float(alpha), bleu.score, bleu.bp, chrf.score, bleu.sys_len, bleu.ref_len, weight)
        rows.append(row)
        if on_alpha is not None:
            on_alpha(row)

    if rerank is not None:
        from .rerank import combine, rescore

        encoded, _ = translator.encode(sources)
    for alpha in alphas:
        if rerank is None:
            add(translator.translate(sources, beam=beam, alpha=alpha, batch_tokens=batch_tokens,
                                     max_len_a=max_len_a, max_len_b=max_len_b, mbr=mbr), alpha)
            continue
        nbest = translator.translate_nbest(sources, beam=beam, alpha=alpha, batch_tokens=batch_tokens,
                                           max_len_a=max_len_a, max_len_b=max_len_b, nbest=beam)
        theirs = rescore(nbest, encoded, translator, rerank.translator, batch_tokens=batch_tokens)
        for weight in rerank_weights:
            add([r[0].text for r in combine(nbest, theirs, weight=weight, alpha=alpha)], alpha, float(weight))
    return best_row(rows).alpha, rows


def best_row(rows: list[AlphaRow]) -> AlphaRow:
    """The row of highest BLEU; ties keep the alpha nearest the paper's 0.6, then the lower weight."""
    return max(rows, key=lambda r: (round(r.bleu, 10), -abs(r.alpha - PAPER_ALPHA), -(r.rerank_weight or 0.0)))


def parse_numbers(text: str, *, what: str, low: float = 0.0, high: float = math.inf) -> tuple[float, ...]:
    """'0.3,0.5' -> (0.3, 0.5), each in [low, high]; argparse.ArgumentTypeError naming ``what``."""
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of numbers, e.g. 0.4,0.6") from None
    if not values or any(not low <= v <= high for v in values):
        bound = f">= {low:g}" if high == math.inf else f"in [{low:g}, {high:g}]"
        raise argparse.ArgumentTypeError(f"{text!r}: one or more {what}, each {bound}")
    return values


def parse_alphas(text: str) -> tuple[float, ...]:
    """'0.6,1.0,1.4' -> (0.6, 1.0, 1.4); each >= 0."""
    return parse_numbers(text, what="alphas")


def parse_weights(text: str) -> tuple[float, ...]:
    """'0.3,0.5' -> (0.3, 0.5); each in [0, 1] (--rerank-weights)."""
    return parse_numbers(text, what="weights", high=1.0)


def add_tune_alpha_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", nargs="+", help="checkpoint or run directory; several: an ensemble")
    parser.add_argument("--src", required=True, help="development source text, one sentence per line")
    parser.add_argument("--ref", required=True, help="its reference translations (detokenized)")
    parser.add_argument("--alphas", type=parse_alphas, default=DEFAULT_ALPHAS,
                        help="comma-separated grid (default: " + ",".join(map(str, DEFAULT_ALPHAS)) + ")")
    parser.add_argument("--beam", type=int, default=4, help="beam size (paper: 4)")
    parser.add_argument("--max-len-a", type=float, default=1.0, help="max output length a*|x|+b (paper: a=1)")
    parser.add_argument("--max-len-b", type=int, default=50, help="(paper: b=50)")
    from .mbr import add_mbr_args
    from .rerank import add_rerank_args

    add_mbr_args(parser)  # each alpha scored on the MBR choices, as `nmt translate --mbr` writes them
    add_rerank_args(parser, tune=True)  # a row per alpha and weight, as `nmt translate --rerank` writes them
    parser.add_argument("--tokenize", default="13a", help="sacreBLEU tokenizer (zh for Chinese output)")
    parser.add_argument("--batch-tokens", type=int, default=2048, help="padded source tokens per batch")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16", "auto", "int8"), default="auto",
                        help="as `nmt translate` (default: auto)")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda, ... (default: cuda if available; cpu for --precision int8)")
    parser.add_argument("--out", default=None, help="also write the table and the choice as JSON here")


def run_tune_alpha(args: argparse.Namespace, overrides: dict) -> int:
    """Prints a markdown table (one row per alpha) and, last, `best alpha: A` (read by the recipes)."""
    from .rerank import load_rerank
    from .mbr import mbr_from_args
    from .translate import Translator, TranslateError, check_output, read_text_lines, set_precision, write_output

    if args.beam < 1:
        raise TranslateError(f"--beam {args.beam}: must be >= 1")
    mbr = mbr_from_args(args)
    if mbr is not None and args.rerank:
        raise TranslateError("--mbr and --rerank: choose one")
    if args.out:
        check_output(args.out)
    sources, references = read_text_lines(args.src), read_text_lines(args.ref)
    translator = Translator.load(args.checkpoint, device=args.device,
                                 precision="int8" if args.precision == "int8" else "fp32")
    if args.precision != "int8":
        set_precision(translator, args.precision)
    rerank = load_rerank(args, 0.5)
    how = f", MBR ({mbr.utility}, T={mbr.temperature:g}) among the {args.beam}-best" if mbr else ""
    if rerank:
        how = f", the {args.beam}-best reranked with {' '.join(args.rerank)}"
    print(f"length penalty on {args.src} ({len(sources)} sentences), beam {args.beam}{how}, "
          f"sacreBLEU tok:{args.tokenize}")
    print(f"| alpha |{' rerank weight |' if rerank else ''} BLEU | BP | chrF | hyp/ref length |")
    print(f"|---|{'---|' if rerank else ''}---|---|---|---|")

    def show(r: AlphaRow) -> None:
        weight = f" {r.rerank_weight:g} |" if rerank else ""
        print(f"| {r.alpha:g} |{weight} {r.bleu:.2f} | {r.brevity_penalty:.3f} | {r.chrf:.2f} | "
              f"{r.hyp_len}/{r.ref_len} |", flush=True)

    best, rows = tune_alpha(translator, sources, references, alphas=args.alphas, beam=args.beam,
                            tokenize=args.tokenize, batch_tokens=args.batch_tokens, max_len_a=args.max_len_a,
                            max_len_b=args.max_len_b, on_alpha=show, mbr=mbr, rerank=rerank,
                            rerank_weights=args.rerank_weights)
    weight = best_row(rows).rerank_weight
    if args.out:
        write_output(args.out, json.dumps({"best_alpha": best, "beam": args.beam, "src": args.src,
                                           "ref": args.ref, "tokenize": args.tokenize,
                                           "checkpoints": [str(c) for c in args.checkpoint],
                                           "mbr": asdict(mbr) if mbr else None,
                                           "rerank": list(args.rerank) if rerank else None,
                                           "best_rerank_weight": weight,
                                           "rows": [asdict(r) for r in rows]}, indent=1) + "\n")
    if rerank:
        print(f"best rerank weight: {weight:g}")
    print(f"best alpha: {best:g}")
    sys.stdout.flush()
    return 0
