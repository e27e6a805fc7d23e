"""Real text through nmt.realtext.job, measured: sentences kept, capitals, inline markup, the
issue's six inputs, and plain test BLEU (each handling on, and off as plain per-line translation).

    python benchmarks/real_text.py --checkpoint runs/demo/average --data runs/demo/data \\
        --tagged ../shared/data/libreoffice_help/en-de --out results/real-text

Tables (markdown, on stdout and in --out/README-tables.md; outputs in --out/*.txt):
1. sentences kept: test lines joined 3 by 3 into one line; sentences out (sentencex on the
   output, --tgt-lang) per line, the share of lines with all 3, BLEU against the 3 references
   joined; default (split) against --no-split.
2. capitals: test BLEU lower-cased (sacreBLEU ``lowercase=True``) of the source as is, UPPER CASED
   and Title Cased, recase on and off; the loop rate (outputs holding a token 4-gram or shorter
   repeated 3 times in a row, or a character 6 times in a row), and with --no-repeat-ngram N
   where the search offers it.
3. markup: the tagged set (--tagged DIR/valid.tagged.{en,de}.gz and .src.tsv.gz) translated with
   format html: the share of outputs well formed (an XML parse of the output wrapped in one
   element) holding exactly the source's tags; text BLEU (tags removed) against translating the
   same sentences untagged; tag placement: per tag of the output, the token F1 of the words it
   wraps against the words the reference's same tag wraps (the n-th tag of that name and
   attributes), mean and share >= 0.5; single-wrapper lines (column 4 of .src.tsv.gz) apart.
3o. tag projection on the reference (``--parts 3o``; forced output, so translation quality is
   out of the measure): each tagged line is planned as ``nmt translate --format html`` plans it
   (nmt.realtext.pipeline.Plan); for each line whose source is one unit (one sentence, uncut, one
   run), the reference's text (tags removed) is taken as the model's output for that unit (its
   pieces forced through the decoder), aligned as the pipeline aligns the model's own translations
   (pipeline.align_results with the plan's prior, job.PROJECTION_DIAGONAL, on the units the plan
   aligns), turned into character pairs by Plan.unit_output, the source's tags projected onto it
   by the plan's TextJob.finish, and scored by part 3's placement F1 against the reference's own
   tags: the words are the same, so a perfect projection scores 1.0. Beside it the monotone guess
   (no alignment: what the CTranslate2 engine gets). Lines of several units, and references longer
   than the model's positions, are skipped and counted.
   ``--diagonals`` (default 0,0.03,0.05,0.07,0.1,0.2,0.5): the widths the prior's is chosen among,
   on lines that are not reported. valid.tagged is cut in two at the first page change (column 1
   of .src.tsv.gz) at or after its middle line
   (``page_halves``: no line, and no page, in both); each width (0: the attention alone) is
   measured on the first half, the width of the best mean F1 chosen, and the second half reports
   the chosen width, nmt translate's own prior (when it differs), the attention alone and the
   monotone guess. ``--json FILE``: those two tables with the command, CPU and commit.
4. the issue's six inputs, as before (plain) and now (default).
5. plain test BLEU: default options against plain per-line translation (must not be lower).
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sacrebleu  # noqa: E402
import torch  # noqa: E402

from nmt.data.lines import clean_line  # noqa: E402
from nmt.infer.options import SearchOptions  # noqa: E402
from nmt.infer.results import Translation  # noqa: E402
from nmt.infer.search import reading_order  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.progress import progress  # noqa: E402
from nmt.realtext.job import PROJECTION_DIAGONAL, TextJob, TextOptions, UnitOutput  # noqa: E402
from nmt.realtext.markup import parse  # noqa: E402
from nmt.realtext.pipeline import Plan, TranslationRequest, align_results, translate_request  # noqa: E402
from nmt.realtext.scan import TAG_KIND, TEXT, scan  # noqa: E402
from nmt.realtext.segment import split_text  # noqa: E402
from nmt.realtext.spans import UNSPACED  # noqa: E402

PLAIN = TextOptions(split=False, recase=False, max_words=0, protect=False)  # each line one sentence, as given


def translate_text(translator, texts, *, options: TextOptions, **search):
    """The pipeline's TextTranslation of a text (or of each of a list) with these options."""
    one = isinstance(texts, str)
    request = TranslationRequest([texts] if one else texts, text=options, search=SearchOptions(**search))
    out = translate_request(translator, request)
    return out[0] if one else out


SIX = [
    "Two dogs play in the snow. A man is riding a bike. The children are laughing.",
    "TWO DOGS PLAY IN THE SNOW.",
    "Two Dogs Play In The Snow.",
    "<b>Two dogs</b> play in the <i>snow</i>.",
    'Two dogs play in the <a href="https://example.com">snow</a> near a house.',
    "A man in a red shirt is standing on a tall ladder next to a building, while a woman with a small "
    "brown dog walks past him on the sidewalk and three children in yellow raincoats are jumping in "
    "puddles near an old man who is sitting on a bench reading a newspaper, and a street musician "
    "plays the guitar for the people passing by on their way home from work in the late evening.",
]


def read(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def bleu(hyps: list[str], refs: list[str], *, lowercase: bool = False) -> float:
    return sacrebleu.corpus_bleu(hyps, [refs], lowercase=lowercase).score


def looping(text: str) -> bool:
    """A token n-gram (n <= 4) three times in a row, or a character six times in a row."""
    if re.search(r"(\w)\1{5}", text):
        return True
    tokens = text.split()
    for n in range(1, 5):
        for i in range(len(tokens) - 3 * n + 1):
            if tokens[i : i + n] == tokens[i + n : i + 2 * n] == tokens[i + 2 * n : i + 3 * n]:
                return True
    return False


def title(s: str) -> str:
    return re.sub(r"[^\W\d_]+", lambda m: m.group(0)[:1].upper() + m.group(0)[1:], s)


class Bench:
    def __init__(self, translator, search: dict, out: Path | None):
        self.t, self.search, self.out = translator, search, out
        self.tables: list[str] = []

    def run(self, texts: list[str], options: TextOptions, name: str, **extra) -> list[str]:
        start = time.perf_counter()
        outs = [r.text for r in translate_text(self.t, texts, options=options, **self.search, **extra)]
        print(f"  {name}: {len(texts)} texts in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        if self.out is not None:
            (self.out / f"{name}.txt").write_text("".join(o.replace("\n", " ") + "\n" for o in outs))
        return outs

    def table(self, title_: str, header: list[str], rows: list[list], *, note: str = "") -> None:
        lines = [f"### {title_}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        text = "\n".join(lines) + "\n" + (f"\n{note}\n" if note else "")
        print(text, flush=True)
        self.tables.append(text)


def sentences_kept(b: Bench, src: list[str], ref: list[str], tgt_lang: str, no_repeat: int) -> None:
    n = len(src) // 3 * 3
    joined = [" ".join(src[i : i + 3]) for i in range(0, n, 3)]
    refs = [" ".join(ref[i : i + 3]) for i in range(0, n, 3)]
    rows = []
    variants = [
        ("split (default)", "split", TextOptions(), {}),
        ("--no-split", "nosplit", TextOptions(split=False), {}),
        (
            f"--no-split, no_repeat_ngram {no_repeat}",
            "nosplit-norepeat",
            TextOptions(split=False),
            {"no_repeat_ngram": no_repeat},
        ),
    ]
    for name, short, options, extra in variants:
        if extra and not no_repeat:
            continue
        outs = b.run(joined, options, f"joined3-{short}", **extra)
        counts = [len(split_text(o, language=tgt_lang).sentences) for o in outs]
        words = sum(len(o.split()) for o in outs) / max(1, sum(len(r.split()) for r in refs))
        rows.append(
            [
                name,
                len(joined),
                f"{sum(counts) / len(counts):.2f}",
                f"{100 * sum(c >= 3 for c in counts) / len(counts):.1f}%",
                f"{words:.2f}",
                f"{bleu(outs, refs):.2f}",
                f"{100 * sum(map(looping, outs)) / len(outs):.1f}%",
            ]
        )
    b.table(
        "1. Three test sentences on one line",
        [
            "handling",
            "lines",
            "sentences out per line",
            "lines with 3 out",
            "output/ref words",
            "BLEU",
            "loops",
        ],
        rows,
    )


def capitals(b: Bench, src: list[str], ref: list[str], no_repeat: int) -> None:
    rows = []
    guard = {"no_repeat_ngram": no_repeat} if no_repeat else None
    variants = [
        ("recase (default)", "recase", TextOptions(), {}),
        ("--no-recase", "norecase", TextOptions(recase=False), {}),
        (f"--no-recase, no_repeat_ngram {no_repeat}", "norecase-norepeat", TextOptions(recase=False), guard),
        (f"recase, no_repeat_ngram {no_repeat}", "recase-norepeat", TextOptions(), guard),
    ]
    for form, texts in (
        ("as is", src),
        ("UPPER", [s.upper() for s in src]),
        ("Title", [title(s) for s in src]),
    ):
        for name, short, options, extra in variants:
            if extra is None or (form == "as is" and short not in ("recase", "norecase")):
                continue
            outs = b.run(texts, options, f"case-{form.split()[0]}-{short}", **extra)
            loops = 100 * sum(map(looping, outs)) / len(outs)
            rows.append([form, name, f"{bleu(outs, ref, lowercase=True):.2f}", f"{loops:.1f}%"])
    b.table(
        "2. Capitals: case-insensitive BLEU and loops",
        ["source", "handling", "BLEU (lowercase)", "loops"],
        rows,
    )


def tags_of(text: str) -> list[str]:
    return [t.raw for t in scan(text) if t.kind != TEXT]


def well_formed(out: str, src: str) -> bool:
    try:
        ET.fromstring(f"<r>{out}</r>")
    except ET.ParseError:
        return False
    return Counter(tags_of(out)) == Counter(tags_of(src))


# words, each character of a script written without spaces a word of its own (as nmt places tags)
TOKEN = re.compile(rf"[{UNSPACED}]|[^\W{UNSPACED}]+")


def tag_contents(text: str) -> list[tuple[str, list[str]]]:
    """(opening tag, the lower-cased tokens it wraps) for each element of a fragment: words, and each
    Chinese or Japanese character alone."""
    out, stack, pos = [], [], 0
    for t in scan(text):
        if t.kind == TEXT:
            continue
        tokens = TOKEN.findall(re.sub(r"&\w+;", " ", text[pos : t.start]).lower())
        for s in stack:
            s[1].extend(tokens)
        pos = t.end
        if t.kind == TAG_KIND and t.closing:
            if stack:
                out.append(tuple(stack.pop()))
        elif t.kind == TAG_KIND and not t.self_closing:
            stack.append((t.raw, []))
    return out


def f1(a: list[str], b: list[str]) -> float:
    if not a and not b:
        return 1.0
    common = sum((Counter(a) & Counter(b)).values())
    if common == 0:
        return 0.0
    p, r = common / len(a), common / len(b)
    return 2 * p * r / (p + r)


def placement(out: str, ref: str) -> list[float]:
    """Per tag of the reference: token F1 of what the output's same tag (n-th of its kind) wraps."""
    got: dict[str, list[list[str]]] = {}
    for tag, words in tag_contents(out):
        got.setdefault(tag, []).append(words)
    seen: Counter = Counter()
    scores = []
    for tag, words in tag_contents(ref):
        k = seen[tag]
        seen[tag] += 1
        mine = got.get(tag, [])
        scores.append(f1(mine[k], words) if k < len(mine) else 0.0)
    return scores


def placement_cells(scores: list[float]) -> list[str]:
    """A table's two cells of tag placement scores: the mean F1 and the share of tags at F1 >= 0.5."""
    n = max(1, len(scores))
    return [f"{sum(scores) / n:.3f}", f"{100 * sum(x >= 0.5 for x in scores) / n:.1f}%"]


@dataclass
class Tagged:
    """A tagged set: sources, references, whether each line is a single wrapper (one element around
    the whole English segment: column 4 of .src.tsv.gz) and its help page (column 1)."""

    src: list[str]
    ref: list[str]
    single: list[bool]
    page: list[str]


def read_tagged(folder: Path, limit: int | None) -> Tagged:
    """The tagged valid set of a libreoffice_help folder (en-de, en-zh: its first ``limit`` lines),
    English to the folder's other language."""
    columns = [line.split("\t") for line in read(folder / "valid.tagged.src.tsv.gz")][:limit]
    tgt = folder.name.split("-")[-1]
    return Tagged(
        read(folder / "valid.tagged.en.gz")[:limit],
        read(folder / f"valid.tagged.{tgt}.gz")[:limit],
        [c[3] == "1" for c in columns],
        [c[0] for c in columns],
    )


def page_halves(pages: list[str]) -> tuple[range, range]:
    """Line indices cut in two at the first page change at or after the middle line: (the half that
    chooses, the half that reports). No line, and no page, is in both."""
    cut = len(pages) // 2
    while 0 < cut < len(pages) and pages[cut] == pages[cut - 1]:
        cut += 1
    return range(cut), range(cut, len(pages))


def markup(b: Bench, folder: Path, limit: int | None) -> None:
    tagged_set = read_tagged(folder, limit)
    src, ref, single = tagged_set.src, tagged_set.ref, tagged_set.single
    tagged = b.run(src, TextOptions(format="html"), "markup-html")
    plain_src = [" ".join(r.text for r in parse(s, html=True).runs) for s in src]
    untagged = b.run(plain_src, TextOptions(), "markup-untagged")
    stripped = [" ".join(r.text for r in parse(o, html=True).runs) for o in tagged]
    refs = [" ".join(r.text for r in parse(r_, html=True).runs) for r_ in ref]
    rows = []
    for name, keep in (
        ("all", lambda i: True),
        ("single wrapper", lambda i: single[i]),
        ("the rest", lambda i: not single[i]),
    ):
        idx = [i for i in range(len(src)) if keep(i)]
        if not idx:
            continue
        wf = 100 * sum(well_formed(tagged[i], src[i]) for i in idx) / len(idx)
        scores = [s for i in idx for s in placement(tagged[i], ref[i])]
        rows.append(
            [
                name,
                len(idx),
                f"{wf:.1f}%",
                f"{bleu([stripped[i] for i in idx], [refs[i] for i in idx]):.2f}",
                f"{bleu([untagged[i] for i in idx], [refs[i] for i in idx]):.2f}",
                len(scores),
                *placement_cells(scores),
            ]
        )
    b.table(
        "3. Inline markup (LibreOffice help, valid.tagged, format html)",
        [
            "lines",
            "n",
            "well formed, source's tags",
            "BLEU tags removed",
            "BLEU untagged",
            "tags",
            "placement F1",
            "F1 >= 0.5",
        ],
        rows,
    )


@dataclass
class Forced:
    """Part 3o's measure: the placement F1 per reference tag of each kept line (by line index) and
    its projected output, the lines skipped by reason, the kept lines that had no alignment pairs
    (TextJob then used the monotone guess) and those whose forced text is not the reference's
    (the model's vocabulary wrote it otherwise: NFKC, unknown characters)."""

    scores: dict[int, list[float]] = field(default_factory=dict)
    outputs: dict[int, str] = field(default_factory=dict)
    skipped: Counter = field(default_factory=Counter)
    unaligned: int = 0
    rewritten: int = 0


def not_one_unit(job: TextJob) -> str | None:
    """Why a job of one text gives the model other than one unit (None: it gives one)."""
    if len(job.units) == 1:
        return None
    if not job.units:
        return "no text"
    if len(job.paragraphs[0]) > 1:
        return "several runs (text between block or untranslated elements)"
    if job.cuts[0]:
        return "a sentence cut (longer than max_words)"
    return "several sentences"


def plan_of(translator) -> Callable[[str], Plan]:
    """A tagged line planned as ``nmt translate --format html`` plans it (pipeline.Plan: its units,
    its TextJob, the prior it aligns with)."""
    return lambda line: Plan(TranslationRequest([line], text=TextOptions(format="html")), translator)


def forced_placement(
    tagged: Tagged,
    lines: Iterable[int],
    *,
    plan_of: Callable[[str], Plan],
    output: Callable[[Plan, str], UnitOutput | None],
    desc: str = "forced",
) -> Forced:
    """Tag placement on the reference, on ``lines`` of ``tagged``: each line whose source is one unit
    of its plan (``plan_of``) gets ``output(plan, text)`` as that unit's output, ``text`` being the
    reference's text with its tags removed (None: it cannot be forced; the line is skipped); the
    plan's TextJob.finish projects the source's tags onto it and ``placement`` scores them against
    the reference's own tags (1.0 per tag where the projection puts it around the reference's words)."""
    forced = Forced()
    lines = list(lines)
    bar = progress(total=len(lines), unit="line", desc=desc)
    for i in lines:
        bar.update(1)
        plan = plan_of(tagged.src[i])
        why = not_one_unit(plan.job)
        text = " ".join(run.text for run in parse(tagged.ref[i], html=True).runs)
        out = None if why else output(plan, text)
        if out is None:
            forced.skipped[why or "reference longer than the model's positions"] += 1
            continue
        forced.unaligned += out.pairs is None
        forced.rewritten += out.text != text
        forced.outputs[i] = plan.job.finish([out])[0].text
        forced.scores[i] = placement(forced.outputs[i], tagged.ref[i])
    bar.close()
    return forced


def forced_translation(translator, text: str) -> Translation | None:
    """``text`` as ``translator``'s output: its pieces (cleaned as a sentence is) in the model's
    order and their decoded text (what the model writes with them); None when they are more than
    an output can be (the model's positions, less BOS). Encoded as target text is (the translator's
    ``tgt_sp`` where it has one)."""
    ids = (getattr(translator, "tgt_sp", None) or translator.sp).encode(clean_line(text))
    if len(ids) > translator.model.cfg.max_positions - 1:
        return None
    tokens = reading_order(translator.model, ids)
    return Translation(translator.decode(tokens), 0.0, tokens)


def forced_outputs(
    translator, *, aligned: bool, diagonal: float | None = None
) -> Callable[[Plan, str], UnitOutput | None]:
    """``output`` for forced_placement: the reference forced as the plan's unit's translation,
    aligned as the pipeline aligns a translation of its own where the plan aligns (align_results
    with the plan's prior, job.PROJECTION_DIAGONAL; ``diagonal``: another width to compare, 0 the
    attention alone), its character pairs from Plan.unit_output; ``aligned`` False: no alignment,
    so TextJob's monotone guess (what an engine without attention gets)."""

    def output(plan: Plan, text: str) -> UnitOutput | None:
        t = forced_translation(translator, text)
        if t is None:
            return None
        if aligned and plan.needs_alignment:
            width = plan.alignment_diagonal if diagonal is None else diagonal or None
            align_results(translator, plan.inputs, [[t]], diagonal=width, only=plan.aligned_units)
        return plan.unit_output(0, t)

    return output


def placement_row(forced: Forced, single: list[bool]) -> list[str]:
    """Lines, tags, and placement_cells of all lines, the single wrappers and the rest."""
    row = [str(len(forced.scores)), str(sum(len(s) for s in forced.scores.values()))]
    for keep in (lambda i: True, lambda i: single[i], lambda i: not single[i]):
        row += placement_cells([x for i in forced.scores if keep(i) for x in forced.scores[i]])
    return row


def best_width(means: dict[float, float]) -> float:
    """The width of the highest mean F1 (a tie: the wider)."""
    return max(means, key=lambda w: (means[w], w))


PLACEMENT_COLUMNS = [
    "lines",
    "tags",
    "all: F1",
    ">= 0.5",
    "single wrapper: F1",
    ">= 0.5",
    "the rest: F1",
    ">= 0.5",
]


def reported_projections(chosen: float) -> list[tuple[str, bool, float | None]]:
    """(row name, aligned, diagonal for forced_outputs) of the reporting half's rows."""
    if chosen == PROJECTION_DIAGONAL:
        rows = [(f"prior of width {chosen:g} (chosen; nmt translate's)", True, None)]
    else:
        rows = [
            (f"prior of width {chosen:g} (chosen)", True, chosen),
            (f"prior of width {PROJECTION_DIAGONAL:g} (nmt translate's)", True, None),
        ]
    return rows + [("the attention alone", True, 0.0), ("monotone guess", False, None)]


def mean_f1(forced: Forced) -> float:
    """The mean placement F1 of all the tags ``forced`` scored."""
    scores = [x for s in forced.scores.values() for x in s]
    return sum(scores) / max(1, len(scores))


def choose_width(b: Bench, tagged: Tagged, lines: range, widths: list[float]) -> tuple[list[list], float]:
    """Each width's placement row on ``lines`` (0: the attention alone) and the width chosen."""
    rows, means = [], {}
    for w in widths:
        output = forced_outputs(b.t, aligned=True, diagonal=w)
        forced = forced_placement(tagged, lines, plan_of=plan_of(b.t), output=output, desc=f"choose {w:g}")
        means[w] = mean_f1(forced)
        name = f"{w:g}" + (" (the attention alone)" if not w else "")
        rows.append([name] + placement_row(forced, tagged.single))
    return rows, best_width(means)


def report_half(b: Bench, tagged: Tagged, lines: range, chosen: float) -> tuple[list[list], Forced]:
    """reported_projections' placement rows on ``lines`` and the first one's Forced."""
    rows, first = [], None
    for name, aligned, diagonal in reported_projections(chosen):
        output = forced_outputs(b.t, aligned=aligned, diagonal=diagonal)
        forced = forced_placement(tagged, lines, plan_of=plan_of(b.t), output=output, desc=f"report {name}")
        rows.append([name] + placement_row(forced, tagged.single))
        first = first or forced
        if b.out is not None:
            outs = [forced.outputs.get(i, "").replace("\n", " ") + "\n" for i in lines]
            (b.out / f"markup-forced-{len(rows)}.txt").write_text("".join(outs))
    return rows, first


def heldout_placement(b: Bench, folder: Path, limit: int | None, widths: list[float]) -> dict:
    """Part 3o: the prior's width chosen on the first of page_halves, reported on the second; the
    two tables printed and returned (with the split) for --json."""
    tagged = read_tagged(folder, limit)
    choose, report = page_halves(tagged.page)
    sweep, chosen = choose_width(b, tagged, choose, widths)
    rows, forced = report_half(b, tagged, report, chosen)
    pages = [len({tagged.page[i] for i in half}) for half in (choose, report)]
    skipped = ", ".join(f"{n} {why}" for why, n in forced.skipped.most_common())
    split = (
        f"valid.tagged cut at a page change: lines 1-{len(choose)} ({pages[0]} pages) choose the width, "
        f"lines {len(choose) + 1}-{len(tagged.src)} ({pages[1]} other pages) report; reporting half "
        f"skipped: {skipped or 'none'}; kept lines without the model's alignment: {forced.unaligned}; "
        f"whose reference text the vocabulary writes otherwise: {forced.rewritten}"
    )
    tables = {
        "split": split,
        "choose_columns": ["width"] + PLACEMENT_COLUMNS,
        "choose_rows": sweep,
        "chosen": chosen,
        "shipped": PROJECTION_DIAGONAL,
        "columns": ["projection"] + PLACEMENT_COLUMNS,
        "rows": rows,
    }
    title_ = "3o. The prior's width, choosing half (forced output; mean F1, share >= 0.5)"
    b.table(title_, tables["choose_columns"], sweep, note=f"Chosen: {chosen:g} (the best mean F1, all tags).")
    title_ = "3o. Tag placement, reporting half (forced output; mean F1, share >= 0.5)"
    b.table(title_, tables["columns"], rows, note=split + ".")
    return tables


def six(b: Bench) -> None:
    rows = []
    for text in SIX:
        fmt = "html" if "<" in text else "text"
        before = translate_text(b.t, text, options=PLAIN, **b.search).text
        after = translate_text(b.t, text, options=TextOptions(format=fmt), **b.search)
        cell = lambda s: s.replace("|", "\\|").replace("<", "&lt;")  # noqa: E731
        note = "; ".join(c.message() for c in after.cuts)
        rows.append([cell(text), cell(before), cell(after.text) + (f" ({note})" if note else "")])
    b.table("4. The issue's six inputs", ["input", "plain (one line, one sentence)", "default"], rows)


def plain_bleu(b: Bench, src: list[str], ref: list[str]) -> None:
    rows = []
    for name, options in (("plain", PLAIN), ("default", TextOptions())):
        outs = b.run(src, options, f"test-{name}")
        rows.append([name, f"{bleu(outs, ref):.2f}"])
    b.table("5. Plain test BLEU", ["options", "BLEU"], rows)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--data", default=None, help="a prepared DATA_DIR with test.{src,tgt}.txt (parts 1, 2, 5)")
    p.add_argument("--src-lang", default="en")
    p.add_argument("--tgt-lang", default="de")
    p.add_argument("--tagged", default=None, help="a libreoffice_help/en-de (or en-zh) folder")
    p.add_argument("--limit", type=int, default=None, help="at most this many lines per set")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--no-repeat-ngram", type=int, default=3, help="the guard's rows (0: none)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parts", default="1,2,3,4,5", help="comma-separated parts; 3o (and 3) need --tagged")
    p.add_argument(
        "--diagonals",
        default="0,0.03,0.05,0.07,0.1,0.2,0.5",
        help="with 3o: the widths of the alignment's diagonal prior to choose among (0: none)",
    )
    p.add_argument("--model-note", default="", help="what the model is, for --json")
    p.add_argument("--json", default=None, help="with 3o: its tables as JSON (scripts/figures.py reads it)")
    p.add_argument("--out", default=None, help="a folder for the outputs and the tables")
    return p


def main() -> None:
    args = parser().parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    t = Translator.load(args.checkpoint, precision="fp32")
    b = Bench(t, {"beam": args.beam}, out)
    parts = set(args.parts.split(","))
    if parts & {"1", "2", "5"}:
        data = Path(args.data)
        src = read(data / f"test.{args.src_lang}.txt")[: args.limit]
        ref = read(data / f"test.{args.tgt_lang}.txt")[: args.limit]
    if "4" in parts:
        six(b)
    if "5" in parts:
        plain_bleu(b, src, ref)
    if "1" in parts:
        sentences_kept(b, src, ref, args.tgt_lang, args.no_repeat_ngram)
    if "2" in parts:
        capitals(b, src, ref, args.no_repeat_ngram)
    if "3" in parts and args.tagged:
        markup(b, Path(args.tagged), args.limit)
    if "3o" in parts and args.tagged:
        widths = [float(w) for w in args.diagonals.split(",")]
        tables = heldout_placement(b, Path(args.tagged), args.limit, widths)
        if args.json:
            from machine import write_table  # benchmarks/machine.py (the script's folder)

            pair = Path(args.tagged).resolve().name  # en-de, en-zh
            what = (
                f"LibreOffice help {pair} valid.tagged, the reference forced as the output, format html, fp32"
            )
            write_table(args.json, "real_text", what=what, model=args.model_note, **tables)
    if out is not None:
        (out / "README-tables.md").write_text("\n".join(b.tables))


if __name__ == "__main__":
    main()
