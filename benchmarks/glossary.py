"""Glossaries (nmt.realtext.glossary) on a test set: a glossary drawn from the set's own references,
then the share of the glossary's terms the translations hold, and BLEU / chrF with and without it.

    python benchmarks/glossary.py --checkpoint runs/demo/average \\
        --src-file ../shared/data/multi30k/test.en.gz --ref-file ../shared/data/multi30k/test.de.gz \\
        [--min-count 3] [--json out.json]

The glossary: a source word (letters only, at least 4 of them, matched in any case) goes in with a
target word when every reference of the sentences holding the source word holds that target word
(as written, at least 4 letters, in at most 5% of all the references: not "Mann" or "einem"), in
at least --min-count sentences; where several target words do, the one of the most sentences. An
oracle glossary, as terminology from a client would be: it says what the references say. Term
accuracy counts (sentence, term) pairs: the target term as a whole word of the translation where
its source term is a word of the source.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sacrebleu  # noqa: E402
from machine import write_table  # noqa: E402

from nmt.data.lines import read_lines  # noqa: E402
from nmt.infer.options import SearchOptions  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.realtext.glossary import Glossary  # noqa: E402
from nmt.realtext.pipeline import TranslationRequest  # noqa: E402

WORD = re.compile(r"[^\W\d_]{4,}")


def draw_glossary(src: list[str], ref: list[str], min_count: int) -> Glossary:
    """The oracle glossary of the module's docstring."""
    holders: dict[str, list[int]] = {}
    for i, s in enumerate(src):
        for w in set(m.group(0).lower() for m in WORD.finditer(s)):
            holders.setdefault(w, []).append(i)
    in_refs = Counter(t for r in ref for t in set(WORD.findall(r)))
    common_words = {t for t, n in in_refs.items() if n > 0.05 * len(ref)}  # Mann, einem, spielt
    pairs = []
    for w, sentences in sorted(holders.items()):
        if len(sentences) < min_count:
            continue
        common = Counter(t for i in sentences for t in set(WORD.findall(ref[i])))
        every = [t for t, n in common.items() if n == len(sentences) and t not in common_words]
        if every:
            pairs.append((w, max(every, key=lambda t: (common[t], t))))
    return Glossary(tuple(pairs))


def term_accuracy(glossary: Glossary, src: list[str], hyps: list[str]) -> tuple[int, int]:
    """(held, asked): the (sentence, term) pairs whose target term the translation holds."""
    held = asked = 0
    for s, h in zip(src, hyps):
        for term in glossary.targets_in(s):
            asked += 1
            held += bool(re.search(rf"(?<!\w){re.escape(term)}(?!\w)", h))
    return held, asked


def run(translator, src: list[str], glossary: Glossary | None, beam: int) -> tuple[list[str], float]:
    request = TranslationRequest(src, search=SearchOptions(beam=beam), glossary=glossary)
    start = time.perf_counter()
    out = translator.translate_request(request)
    return [t.text for t in out], time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src-file", required=True)
    parser.add_argument("--ref-file", required=True)
    parser.add_argument("--min-count", type=int, default=3)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--model-note", default="", help="what the model is, for the JSON")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    src, ref = list(read_lines(args.src_file)), list(read_lines(args.ref_file))
    glossary = draw_glossary(src, ref, args.min_count)
    translator = Translator.load(args.checkpoint, precision="fp32")
    rows = []
    for name, g in (("without", None), ("with the glossary", glossary)):
        hyps, seconds = run(translator, src, g, args.beam)
        held, asked = term_accuracy(glossary, src, hyps)
        bleu = sacrebleu.corpus_bleu(hyps, [ref]).score
        chrf = sacrebleu.corpus_chrf(hyps, [ref]).score
        rows.append(
            [
                name,
                f"{100 * held / max(asked, 1):.1f}% of {asked}",
                f"{bleu:.2f}",
                f"{chrf:.2f}",
                f"{seconds:.0f}",
            ]
        )
        print(f"{name}: terms {held}/{asked}, BLEU {bleu:.2f}, chrF {chrf:.2f}, {seconds:.0f} s", flush=True)
    columns = ["glossary", "terms held", "BLEU", "chrF", "seconds"]
    print(
        f"\nglossary: {len(glossary.pairs)} terms, e.g. "
        + ", ".join(f"{a}={b}" for a, b in glossary.pairs[:8])
    )
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    print("\n".join("| " + " | ".join(r) + " |" for r in rows))
    if args.json:
        what = f"a glossary of {len(glossary.pairs)} terms drawn from the references "
        what += f"(--min-count {args.min_count}), beam {args.beam}, real text on, fp32"
        terms = [list(p) for p in glossary.pairs]
        write_table(
            args.json, "glossary", what=what, model=args.model_note, terms=terms, columns=columns, rows=rows
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
