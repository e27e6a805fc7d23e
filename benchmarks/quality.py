"""Confidence and guards (nmt.infer.confidence, nmt.infer.guards) on a set of sentence pairs.

    python benchmarks/quality.py --checkpoint runs/demo/average \\
        --src-file $NMT_DATA_DIR/multi30k/test.en.gz --ref-file $NMT_DATA_DIR/multi30k/test.de.gz \\
        [--name test2016] [--sweep] [--json out.json]

Confidence: the Spearman rank correlation between each sentence's confidence (the checkpoint's
confidence.json, fitted by `nmt calibrate` on a validation set) and its chrF against the reference,
and how many of the 10% lowest-chrF sentences are among the 10% least confident.

Guards: the share of sentences flagged (after the retry) on the clean set (false alarms), and the
share of deliberately broken outputs caught (flagged before any retry):
- loop: each sentence searched with a minimum output length of 2.5 times its source's pieces (the
  model forced to go on past its end);
- caps: the sources in ALL CAPS, translated without recasing;
- clause: the clean output with a stretch of its words removed (after its first comma, else its
  last 40%), scored by teacher forcing as if the model had written it; sentences of 8 words or more.
``--sweep`` prints, for omission thresholds, the false alarms and the clauses caught (choose on a
validation set, never on a test set), and for the deletion test's coverage bound
(guards.UNUSED_COVERAGE) the share of the references, forced as outputs, flagged `omission` (a
reference translates every word: false alarms) and of the references less a clause (caught).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import write_table  # noqa: E402

from nmt.data.lines import read_lines  # noqa: E402
from nmt.infer import guards  # noqa: E402
from nmt.infer.calibrate import worst_caught  # noqa: E402
from nmt.infer.confidence import spearman  # noqa: E402
from nmt.infer.options import SearchOptions  # noqa: E402
from nmt.infer.results import Translation  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.realtext.job import TextOptions  # noqa: E402
from nmt.realtext.pipeline import TranslationRequest  # noqa: E402
from nmt.realtext.quality import QualityOptions, judge, score_results  # noqa: E402


def chrf(hyp: str, ref: str) -> float:
    from sacrebleu.metrics import CHRF

    return CHRF().sentence_score(hyp, [ref]).score


ONE_PER_LINE = TextOptions(split=False, recase=False, max_words=0)  # each line one sentence, as given


def confidence_rows(translator, src, ref, beam):
    """Spearman and the worst 10% caught, on sentences translated one per line."""
    out = translator.translate_request(
        TranslationRequest(src, text=ONE_PER_LINE, search=SearchOptions(beam=beam))
    )
    conf = [t.confidence for t in out]
    chrfs = [chrf(t.text, r) for t, r in zip(out, ref)]
    flagged = sum(bool(t.flags) for t in out) / len(out)
    retried = sum(any(q.retried for q in t.sentences) for t in out) / len(out)
    return out, spearman(conf, chrfs), worst_caught(conf, chrfs), flagged, retried


def scored(translator, inputs: list[str], outputs: list[list[int]]) -> list[Translation]:
    """Given outputs scored by teacher forcing (with coverage) as if the model had written them."""
    results = [[Translation(translator.decode(o), 0.0, o)] for o in outputs]
    score_results(translator, inputs, results, coverage=True)
    return [r[0] for r in results]


def loop_outputs(translator, src: list[str], beam: int) -> list[Translation]:
    """Each source searched with a minimum length of 2.5x its pieces."""
    sources, _ = translator.encode(src)
    out: list[Translation | None] = [None] * len(src)
    by_len: dict[int, list[int]] = {}
    for i, s in enumerate(sources):
        by_len.setdefault(len(s), []).append(i)
    for n, idx in by_len.items():
        options = SearchOptions(beam=beam, min_len=int(2.5 * n), max_len_a=3.0, max_len_b=10)
        res = translator.translate_nbest([src[i] for i in idx], options)
        for i, r in zip(idx, res):
            out[i] = r[0]
    return scored(translator, src, [t.tokens for t in out])


def without_clause(text: str) -> str | None:
    """The text less the words after its first comma (else its last 40%), its end kept."""
    words = text.split()
    if len(words) < 8:
        return None
    comma = next((k for k, w in enumerate(words[:-2]) if w.endswith(",")), None)
    keep = words[: comma + 1] if comma is not None and comma >= 2 else words[: int(len(words) * 0.6)]
    cut = " ".join(keep).rstrip(",")
    return cut + ("." if text.rstrip().endswith(".") and not cut.endswith(".") else "")


def flag_share(translator, src: list[str], outs: list[Translation]) -> tuple[float, dict]:
    flags = [judge(translator, s, t).flags for s, t in zip(src, outs)]
    by = {f: sum(f in fl for fl in flags) / len(flags) for f in guards.FLAGS}
    return sum(bool(fl) for fl in flags) / len(flags), by


def deletion_sweep(translator, src: list[str], ref: list[str]) -> None:
    """The deletion test's coverage bound against the references forced as outputs and the
    references less a clause (each bound scored anew: it chooses the words tested)."""
    sp, default = translator.sp, guards.UNUSED_COVERAGE
    pairs = [(s, c) for s, c in ((s, without_clause(r)) for s, r in zip(src, ref)) if c]
    try:
        for bound in (0.0, 0.1, 0.2, 0.3, 0.5):
            guards.UNUSED_COVERAGE = bound
            _, fa = flag_share(translator, src, scored(translator, src, [sp.encode(r) for r in ref]))
            cut = scored(translator, [s for s, _ in pairs], [sp.encode(c) for _, c in pairs])
            _, hit = flag_share(translator, [s for s, _ in pairs], cut)
            print(
                f"deletion test under coverage {bound}: references flagged omission "
                f"{100 * fa['omission']:.1f}%, references less a clause caught {100 * hit['omission']:.1f}%"
            )
    finally:
        guards.UNUSED_COVERAGE = default


def guard_rows(translator, src, clean: list[str], beam: int, sweep: bool) -> list[list[str]]:
    rows = []
    loops = loop_outputs(translator, src, beam)
    caps = translator.translate_request(
        TranslationRequest(
            [s.upper() for s in src],
            text=ONE_PER_LINE,
            search=SearchOptions(beam=beam),
            quality=QualityOptions(guards=True),
        )
    )
    caught_caps = sum(any(q.flags for q in t.sentences) or any(q.retried for q in t.sentences) for t in caps)
    pairs = [(s, without_clause(c)) for s, c in zip(src, clean)]
    pairs = [(s, c) for s, c in pairs if c]
    sp = translator.sp
    cut_outs = scored(translator, [s for s, _ in pairs], [sp.encode(c) for _, c in pairs])
    clean_outs = scored(translator, src, [sp.encode(c) for c in clean])
    for name, ins, outs in (("loop", src, loops), ("clause", [s for s, _ in pairs], cut_outs)):
        share, by = flag_share(translator, ins, outs)
        rows.append(
            [name, str(len(outs)), f"{100 * share:.1f}%"] + [f"{100 * by[f]:.1f}%" for f in guards.FLAGS]
        )
    rows.append(["caps", str(len(src)), f"{100 * caught_caps / len(src):.1f}%"] + ["" for _ in guards.FLAGS])
    if sweep:
        shipped = guards.OMISSION_MASS
        for mass in (0.02, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3):
            guards.OMISSION_MASS = mass
            fa, _ = flag_share(translator, src, clean_outs)
            hit, _ = flag_share(translator, [s for s, _ in pairs], cut_outs)
            print(f"omission mass {mass}: clean flagged {100 * fa:.1f}%, clause caught {100 * hit:.1f}%")
        guards.OMISSION_MASS = shipped
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src-file", required=True)
    parser.add_argument("--ref-file", required=True)
    parser.add_argument("--name", default="test")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--limit", type=int, default=0, help="the first N pairs only")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--guards", action="store_true", help="also the broken inputs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    src, ref = list(read_lines(args.src_file)), list(read_lines(args.ref_file))
    if args.limit:
        src, ref = src[: args.limit], ref[: args.limit]
    translator = Translator.load(args.checkpoint, precision="fp32")
    out, rho, caught, flagged, retried = confidence_rows(translator, src, ref, args.beam)
    print(
        f"{args.name}: Spearman {rho:.3f}, worst 10% caught {100 * caught:.0f}%, "
        f"clean flagged {100 * flagged:.1f}% (retried {100 * retried:.1f}%)",
        flush=True,
    )
    rows = [[args.name, str(len(src)), f"{rho:.3f}", f"{100 * caught:.0f}%", f"{100 * flagged:.1f}%"]]
    guard_table = (
        guard_rows(translator, src, [t.text for t in out], args.beam, args.sweep) if args.guards else []
    )
    if args.guards and args.sweep:
        deletion_sweep(translator, src, ref)
    for r in guard_table:
        print(" | ".join(r), flush=True)
    if args.json:
        write_table(
            args.json,
            "quality",
            what=f"{args.name}: confidence (calibration {translator.calibration.fitted_on}) and guards, "
            f"beam {args.beam}, fp32, sentences one per line",
            columns=["set", "sentences", "Spearman", "worst 10% caught", "clean flagged"],
            rows=rows,
            guard_columns=["broken", "sentences", "caught", *guards.FLAGS],
            guard_rows=guard_table,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
