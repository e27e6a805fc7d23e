"""The work of beam search's two early-termination rules: beam-rows x steps decoded under ``exact``
(the paper's) and ``fast`` (CTranslate2's), and how many of the exact rule's rows could be shown
unable to win (their bound s / lp(L_max) at or below the nbest-th finished score; see
nmt.infer.search.still_searching). Counts, not timings: they do not depend on the machine.

    python benchmarks/stopping_rules.py --checkpoint runs/demo/average \\
        --src-file ../shared/data/multi30k/test.en.gz [--shortlist shortlist.txt] [--beam 4]

Prints one markdown table: rule, steps, beam-rows x steps, ratio to fast, rows that could not win."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nmt.data.lines import clean_line, read_lines  # noqa: E402
from nmt.infer import search  # noqa: E402
from nmt.infer.options import SearchOptions
from nmt.infer.translate import BatchedSearch, Translator  # noqa: E402


def counting(counts: dict):
    """search.still_searching that also adds, per step, the active rows and those that cannot win."""
    still_searching = search.still_searching

    def count(finished, alive, scores, is_eos, t, rules):
        counts["steps"] += 1
        counts["rows"] += len(alive) * rules.k
        for i, s in enumerate(scores.tolist()):
            sentence = finished[alive[i]]
            bar = sentence[rules.nbest - 1].score if len(sentence) >= rules.nbest else None
            for score in s:
                if score == float("-inf") or (
                    bar is not None
                    and search.max_score_bound(score, t + 1, rules.max_len[alive[i]], rules.alpha) <= bar
                ):
                    counts["losing"] += 1
        return still_searching(finished, alive, scores, is_eos, t, rules)

    return count


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--src-file", required=True)
    p.add_argument("--shortlist", help="a file of `nmt shortlist`")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--batch-tokens", type=int, default=2048, help="as translate_speed.py")
    p.add_argument("--limit", type=int, default=None)
    args = p.parse_args()
    t = Translator.load(args.checkpoint, device="cpu", precision="fp32", shortlist=args.shortlist)
    sources, _ = t.encode([clean_line(s) for s in read_lines(args.src_file)][: args.limit])
    print(f"{len(sources)} sentences, beam {args.beam}, shortlist: {args.shortlist or 'no'}\n")
    print(
        "| stopping | steps | beam-rows x steps | x fast | rows that could not win (the exact rule's bound) |"
    )
    print("|---|---|---|---|---|")
    rows = {}
    original = search.still_searching
    for rule in ("fast", "exact"):
        counts = {"steps": 0, "rows": 0, "losing": 0}
        search.still_searching = counting(counts)
        try:
            options = SearchOptions(beam=args.beam, alpha=0.6, stopping=rule)
            BatchedSearch(options, dtype=t.dtype, shortlist=t.shortlist).sources(
                t.model, sources, batch_tokens=args.batch_tokens
            )
        finally:
            search.still_searching = original
        rows[rule] = counts["rows"]
        print(
            f"| {rule} | {counts['steps']:,} | {counts['rows']:,} | {counts['rows'] / rows['fast']:.2f} | "
            f"{counts['losing']:,} ({counts['losing'] / counts['rows']:.1%}) |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
