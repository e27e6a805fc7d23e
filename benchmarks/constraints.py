"""Hard lexical constraints (nmt.infer.constraints) on a test set: BLEU with and without, the share of
constraints met, and the speed cost, with constraints taken from the references.

    flock /tmp/nmt-bench.lock python benchmarks/constraints.py --checkpoint runs/demo/average \\
        --src-file ../shared/data/multi30k/test.en.gz --ref-file ../shared/data/multi30k/test.de.gz

The constraints (deterministic, from the references and the unconstrained output):
  * a reference phrase is 1 to 3 consecutive whitespace-separated words of the reference with no
    punctuation inside: only the last word may end with punctuation (. , ; : ! ? " ' ) ] }), which
    the phrase leaves out, and no word starts with punctuation; so every phrase is a substring of
    its reference;
  * a phrase is missing when its words, as a sequence, do not occur in the unconstrained output's
    words (punctuation stripped from each word's ends, case kept);
  * on line i (counted from 1), the first constraint is the leftmost missing phrase of
    n = 1 + (i - 1) mod 3 words (lines 1, 2, 3, 4, ...: 1, 2, 3, 1, ... words), or if there is
    none, of the closest length (the shorter first); sentences on even lines get a second one,
    by the same rule with n = 1 + i mod 3 among the missing phrases that do not overlap the first
    in the reference. Phrases the vocabulary cannot write (characters it lacks) are never chosen;
    a sentence whose output misses no phrase gets none.
"Met" = the constraint's text occurs in the output's text; also counted: met as whole words. Both
searches get the same batches
(``--batch-tokens``), beam, length penalty and threads; each is timed ``--repeat`` times and the
fastest run is reported (search and text processing, as `nmt translate`, model loaded once). It
prints markdown tables, and with ``--out-dir`` writes the constraints file (for `nmt translate
--constraints`) and both outputs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import cpu_name  # noqa: E402

from nmt.data.lines import read_lines  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.metrics import corpus_scores  # noqa: E402
from nmt.vocab import UNK  # noqa: E402

PUNCT = ".,;:!?\"')]}"


def reference_phrases(ref: str) -> list[tuple[int, int, str]]:
    """(first word, end word, text) of every phrase of 1-3 reference words with no punctuation
    inside (the last word's trailing punctuation left out)."""
    words = ref.split()
    out = []
    for i in range(len(words)):
        for n in (1, 2, 3):
            span = words[i : i + n]
            if len(span) < n or any(w[0] in PUNCT + "([{" for w in span):
                continue
            if any(w.rstrip(PUNCT) != w for w in span[:-1]):
                continue
            last = span[-1].rstrip(PUNCT)
            if last:
                out.append((i, i + n, " ".join(span[:-1] + [last])))
    return out


def words_of(text: str) -> list[str]:
    """The words of ``text`` with punctuation stripped from their ends."""
    return [w.strip(PUNCT + "([{") for w in text.split()]


def contains(words: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(words[i : i + n] == phrase for i in range(len(words) - n + 1))


def pick(missing: list[tuple[int, int, str]], n: int) -> tuple[int, int, str]:
    """The leftmost phrase of ``n`` words, else of the closest length (the shorter first)."""
    return min(missing, key=lambda p: (abs(p[1] - p[0] - n), p[1] - p[0] > n, p[0]))


def choose_constraints(ref: str, hyp: str, line: int, writable) -> list[str]:
    """The constraints of one sentence (see the module docstring); ``line`` counts from 1."""
    hyp_words = words_of(hyp)
    missing = [
        (i, j, text)
        for i, j, text in reference_phrases(ref)
        if not contains(hyp_words, text.split()) and writable(text)
    ]
    if not missing:
        return []
    first = pick(missing, 1 + (line - 1) % 3)
    chosen = [first]
    rest = [p for p in missing if p[1] <= first[0] or p[0] >= first[1]]
    if line % 2 == 0 and rest:
        chosen.append(pick(rest, 1 + line % 3))
    return [text for _, _, text in chosen]


def timed(fn, repeat: int):
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return out, best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--src-file", required=True)
    p.add_argument("--ref-file", required=True)
    p.add_argument("--limit", type=int, default=None, help="first N sentences")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--repeat", type=int, default=2, help="timed runs of each search (the fastest is reported)"
    )
    p.add_argument(
        "--out-dir", default=None, help="write constraints.tsv, plain.txt and constrained.txt here"
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    src = list(read_lines(args.src_file))[: args.limit]
    refs = list(read_lines(args.ref_file))[: args.limit]
    t = Translator.load(args.checkpoint, device="cpu", precision="fp32")
    kw = dict(beam=args.beam, alpha=args.alpha, batch_tokens=args.batch_tokens)

    plain, plain_s = timed(lambda: t.translate_sentences(src, **kw), args.repeat)

    def writable(text: str) -> bool:
        return UNK not in t.sp.encode(text)

    cons = [choose_constraints(r, h, i + 1, writable) for i, (r, h) in enumerate(zip(refs, plain))]
    constrained, cons_s = timed(lambda: t.translate_sentences(src, constraints=cons, **kw), args.repeat)

    n_phrases = sum(map(len, cons))
    met = sum(phrase in out for out, phrases in zip(constrained, cons) for phrase in phrases)
    whole = sum(
        contains(words_of(out), phrase.split())
        for out, phrases in zip(constrained, cons)
        for phrase in phrases
    )
    all_met = sum(all(ph in out for ph in phrases) for out, phrases in zip(constrained, cons) if phrases)
    n_sent = sum(1 for c in cons if c)
    words = [len(ph.split()) for c in cons for ph in c]
    plain_bleu = corpus_scores(plain, [refs])
    cons_bleu = corpus_scores(constrained, [refs])
    if args.out_dir:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "constraints.tsv").write_text("".join("\t".join(c) + "\n" for c in cons), encoding="utf-8")
        (out / "plain.txt").write_text("".join(x + "\n" for x in plain), encoding="utf-8")
        (out / "constrained.txt").write_text("".join(x + "\n" for x in constrained), encoding="utf-8")

    print(
        f"checkpoint {args.checkpoint}; {len(src)} sentences of {args.src_file}; beam {args.beam}, alpha "
        f"{args.alpha}, batch tokens {args.batch_tokens}; {args.threads} thread(s) on {cpu_name()}; "
        f"torch {torch.__version__}; fastest of {args.repeat} runs"
    )
    print(
        f"constraints: {n_phrases} phrases on {n_sent} sentences ({sum(len(c) == 2 for c in cons)} "
        "with two); "
        f"phrase length in words: " + ", ".join(f"{n}: {words.count(n)}" for n in (1, 2, 3))
    )
    print()
    print("| search | BLEU | chrF | constraints met | sentences/s | time (s) |")
    print("|---|---|---|---|---|---|")
    print(
        f"| no constraints | {plain_bleu.bleu:.2f} | {plain_bleu.chrf:.2f} | "
        f"{sum(ph in o for o, c in zip(plain, cons) for ph in c)}/{n_phrases} | {len(src) / plain_s:.1f} | "
        f"{plain_s:.1f} |"
    )
    print(
        f"| constraints | {cons_bleu.bleu:.2f} | {cons_bleu.chrf:.2f} | {met}/{n_phrases} "
        f"({100 * met / max(1, n_phrases):.1f}%; all of a sentence's: {all_met}/{n_sent}) | "
        f"{len(src) / cons_s:.1f} | {cons_s:.1f} |"
    )
    print()
    print(
        f"constraints met as whole words (the phrase's words among the output's, punctuation stripped; a "
        f"phrase is searched for as pieces, so a word may go on after its last piece): {whole}/{n_phrases} "
        f"({100 * whole / max(1, n_phrases):.1f}%)"
    )
    print(f"speed cost: constrained search takes {cons_s / plain_s:.2f}x the time of the unconstrained one")
    return 0 if met == n_phrases else 1


if __name__ == "__main__":
    sys.exit(main())
