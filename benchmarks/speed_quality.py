"""The speed-quality table: test BLEU and translation speed of a teacher, its ensemble and its distilled
students (`nmt distill`), on every axis a user can choose, in one run on one CPU.

    python benchmarks/speed_quality.py \\
        --model teacher=runs/distill/teacher/average \\
        --model ensemble=runs/distill/teacher/average,runs/seed2/average \\
        --model student=runs/distill/average --model student-tiny=runs/distill-tiny/average \\
        --src-file ../shared/data/multi30k/test.en.gz --ref-file ../shared/data/multi30k/test.de.gz \\
        --shortlist runs/distill/shortlist.txt --threads 2 \\
        --json results/distill/speed_quality.json --markdown results/distill/speed_quality.md

Axes (each row one combination): model x engine (nmt's torch engine, CTranslate2) x precision
(fp32, int8) x vocabulary shortlist (without; with, when --shortlist is given: nmt searches each
sentence over its own list, its default scope, CTranslate2 each batch over its union, its vocabulary
map) x beam (4, greedy).
Every row is timed as benchmarks/translate_speed.py times its rows (benchmarks/decode_timing.py):
search only, token ids in and out (each model's own SentencePiece model encodes the test lines
once, outside the timing), the same length-sorted batches of --batch-tokens padded source tokens,
the same beam, length penalty (greedy: none) and length limit (|x| + --max-len-b), the same threads,
each engine in a fresh process of its own, the fastest of --repeat rounds; nmt stops by --stopping
(default: the paper's exact rule, nmt's default), CTranslate2 by its own. Loading and exporting
(CTranslate2 exports a checkpoint into its cache on first use) are not timed. BLEU: sacreBLEU on the
detokenized output. Columns: sent/s = test sentences per second;
words/s/core = output words (whitespace-separated) per second divided by --threads; "x teacher" =
speed over the first --model's row with the same engine, precision, shortlist and beam; "x CT2 int8
teacher" = speed over the first model translated by CTranslate2 in int8, beam 4, without shortlist
(the fast alternative without distillation). An ensemble has no CTranslate2 rows (one model per
CTranslate2 translator). The CPU (lscpu) and the commit head the JSON and the markdown; compare
figures only within one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_timing import Rows, Search, Work, measure  # noqa: E402
from machine import command_line, cpu_path, data_dir, public_command  # noqa: E402

from nmt.checkpoint import model_config, read_config, resolve_checkpoint  # noqa: E402
from nmt.data.lines import read_lines  # noqa: E402
from nmt.infer.translate import Translator  # noqa: E402
from nmt.metrics import corpus_scores  # noqa: E402

COLUMNS = (
    "model",
    "layers",
    "engine",
    "precision",
    "shortlist",
    "beam",
    "BLEU",
    "sent/s",
    "words/s/core",
    "x teacher",
    "x CT2 int8 teacher",
)
ENGINE_NAMES = {"torch": "nmt", "ctranslate2": "CTranslate2"}


@dataclass(frozen=True)
class Setting:
    """One row's choices."""

    model: str
    engine: str
    precision: str
    shortlist: bool
    beam: int


@dataclass
class Row:
    setting: Setting
    layers: str
    bleu: float | None = None
    seconds: float | None = None
    sentences: int = 0
    words: int = 0
    skipped: str = ""  # why the row has no figures

    def rate(self, threads: int) -> tuple[float, float]:
        """(sentences per second, output words per second per core)."""
        return self.sentences / self.seconds, self.words / self.seconds / threads


def parse_models(specs: list[str]) -> dict[str, list[str]]:
    """``NAME=CKPT[,CKPT...]`` -> {name: checkpoints} (several checkpoints: an ensemble)."""
    models = {}
    for spec in specs:
        name, eq, paths = spec.partition("=")
        if not eq or not name or not paths:
            raise SystemExit(f"--model {spec!r}: expected NAME=CHECKPOINT[,CHECKPOINT...]")
        models[name] = paths.split(",")
    return models


@functools.cache
def layers(paths: tuple[str, ...]) -> str:
    """'N=6/2, d 256, ff 1024' (depths, d_model, d_ff) for one model; the members' joined by '+' for
    an ensemble."""
    out = []
    for p in paths:
        directory = resolve_checkpoint(p)
        cfg = model_config(directory, read_config(directory))
        out.append(f"{cfg.depth()}, d {cfg.d_model}, ff {cfg.d_ff}")
    return " + ".join(out)


def describe(models: dict[str, list[str]]) -> str:
    """Each model as its checkpoints say: 'NAME: PATH (layers; averaged from step A to B)'."""
    out = []
    for name, paths in models.items():
        parts = []
        for p in paths:
            steps = read_config(resolve_checkpoint(p)).get("averaged_from") or []
            averaged = f"; the average of {steps[0]} .. {steps[-1]}" if steps else ""
            parts.append(f"{p} ({layers((p,))}{averaged})")
        out.append(f"{name}: {' + '.join(parts)}")
    return "; ".join(out)


def settings(args, models: dict[str, list[str]]) -> list[Setting]:
    shortlists = [False, True] if args.shortlist else [False]
    return [
        Setting(name, engine, precision, shortlist, beam)
        for name in models
        for engine in args.engines.split(",")
        for precision in args.precisions.split(",")
        for shortlist in shortlists
        for beam in (int(b) for b in args.beams.split(","))
    ]


def model_groups(args, models: dict[str, list[str]], lines: list[str]):
    """What decode_timing times: per model its sources (token ids, its own SentencePiece model) and
    one Rows per engine, precision (and, for CTranslate2, shortlist: its export with or without the
    vocabulary map); where each setting's result is ({Setting: (engine, i, j)}); the translator that
    encodes and decodes each model's text (loaded here, never timed)."""
    from nmt.infer.engine_ctranslate2 import exported_dir
    from nmt.infer.shortlist import load as load_shortlist

    listing = load_shortlist(args.shortlist) if args.shortlist else None
    texts, sources, rows, where = {}, {}, {}, {}
    for s in settings(args, models):
        paths = models[s.model]
        if s.engine == "ctranslate2" and len(paths) > 1:
            continue  # an ensemble: the torch engine only (measure_all says so)
        if s.model not in texts:
            texts[s.model] = Translator.load(paths, device="cpu", precision="fp32", shortlist=False)
            sources[s.model] = texts[s.model].encode(lines)[0]
        if s.engine == "torch":
            key, path = ("nmt", s.model, s.precision), tuple(paths)
        else:
            key = ("ct2", s.model, s.precision, s.shortlist)
            path = (str(exported_dir(paths[0], listing if s.shortlist else None)),)
        if key not in rows:
            shortlist = args.shortlist if key[0] == "nmt" else None
            rows[key] = Rows(key[0], s.precision, path, sources[s.model], (), shortlist)
        searches = rows[key].searches
        where[s] = (key, len(searches))
        rows[key] = dataclasses.replace(
            rows[key], searches=(*searches, Search(s.beam, args.stopping, s.shortlist))
        )
    groups = {e: [r for k, r in rows.items() if k[0] == e] for e in ("nmt", "ct2")}
    index = {k: [kk for kk in rows if kk[0] == k[0]].index(k) for k in rows}
    return groups, {s: (k[0], index[k], j) for s, (k, j) in where.items()}, texts, sources


def measure_all(args, models: dict[str, list[str]], data: tuple[list[str], list[str]]) -> list[Row]:
    """Every setting's row: its search timed by decode_timing (search only, each engine in its own
    process, the fastest of --repeat rounds), BLEU of its outputs detokenized."""
    lines, refs = data
    groups, where, texts, sources = model_groups(args, models, lines)
    work = Work(
        batch_tokens=args.batch_tokens,
        alpha=args.alpha,
        max_len_b=args.max_len_b,
        threads=args.threads,
        warmup=args.warmup,
    )
    timed = measure(groups, work, args.repeat, log=lambda m: print(m, file=sys.stderr, flush=True))
    out = []
    for s in settings(args, models):
        row = Row(s, layers(tuple(models[s.model])))
        result = timed.get(where[s]) if s in where else "an ensemble: the torch engine only"
        if isinstance(result, str):
            row.skipped = result
        else:
            hyps = [
                texts[s.model].decode(ids) if src else "" for ids, src in zip(result.ids, sources[s.model])
            ]
            row.seconds, row.sentences = result.seconds, len(lines)
            row.words = sum(len(h.split()) for h in hyps)
            row.bleu = corpus_scores(hyps, [refs]).bleu
        out.append(row)
    return out


def find(rows: list[Row], **want) -> Row | None:
    for r in rows:
        if not r.skipped and all(getattr(r.setting, k) == v for k, v in want.items()):
            return r
    return None


def ratios(rows: list[Row], teacher: str) -> list[tuple[float | None, float | None]]:
    """Each row's (x teacher, x CT2 int8 teacher) speed ratios."""
    reference = find(rows, model=teacher, engine="ctranslate2", precision="int8", shortlist=False, beam=4)
    out = []
    for r in rows:
        if r.skipped:
            out.append((None, None))
            continue
        same = find(rows, **{**asdict(r.setting), "model": teacher})
        speed = r.sentences / r.seconds
        out.append(
            (
                speed / (same.sentences / same.seconds) if same else None,
                speed / (reference.sentences / reference.seconds) if reference else None,
            )
        )
    return out


def goals(rows: list[Row], teacher: str, stopping: str = "exact") -> list[str]:
    """Comparisons at equal settings, read off the rows (no row picked by its test BLEU): each model,
    without and with the shortlist, against the teacher as `nmt translate` runs it (nmt, beam 4, no
    shortlist, the same precision), and nmt against CTranslate2 on the same model at the same
    precision and search (no shortlist; at beam 4 each engine stops by its own rule)."""
    lines = []
    for r in rows:
        s = r.setting
        if r.skipped or s.model == teacher or s.engine != "torch" or s.beam != 4:
            continue
        t = find(rows, model=teacher, engine="torch", precision=s.precision, shortlist=False, beam=4)
        if t:
            listed = " with the shortlist" if s.shortlist else ""
            lines.append(
                f"{s.model}{listed} against {teacher} without, nmt {s.precision} beam 4: BLEU "
                f"{r.bleu - t.bleu:+.2f}, {(r.sentences / r.seconds) / (t.sentences / t.seconds):.2f}x the "
                "sentences/s"
            )
    for r in rows:
        s = r.setting
        if r.skipped or s.engine != "torch" or s.shortlist:
            continue
        ct2 = find(rows, **{**asdict(s), "engine": "ctranslate2"})
        if ct2:
            search = (
                "greedy" if s.beam == 1 else f"beam {s.beam} (nmt's {stopping} stopping, CTranslate2's own)"
            )
            lines.append(
                f"nmt against CTranslate2 on {s.model}, {s.precision} {search}: "
                f"{(r.sentences / r.seconds) / (ct2.sentences / ct2.seconds):.2f}x the sentences/s "
                f"(BLEU {r.bleu:.2f} against {ct2.bleu:.2f})"
            )
    return lines


def cpu() -> dict:
    """lscpu's model name, CPU count and hypervisor, and the flags that choose nmt's kernels."""
    info = {}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        from machine import cpu_name

        return {"Model name": cpu_name()}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Hypervisor vendor"):
            info[key.strip()] = value.strip()
        if key.strip() == "Flags":
            flags = set(value.split())
            info["flags"] = sorted(flags & {"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile"})
    return info


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parents[1]), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cells(r: Row, ratio: tuple, threads: int) -> list[str]:
    s = r.setting
    head = [s.model, r.layers, ENGINE_NAMES[s.engine], s.precision, "yes" if s.shortlist else "no"]
    head.append("greedy" if s.beam == 1 else str(s.beam))
    if r.skipped:
        return head + ["-", "-", "-", "-", f"({r.skipped})"]
    sent, words = r.rate(threads)
    return head + [
        f"{r.bleu:.2f}",
        f"{sent:.1f}",
        f"{words:.0f}",
        "-" if ratio[0] is None else f"{ratio[0]:.2f}",
        "-" if ratio[1] is None else f"{ratio[1]:.2f}",
    ]


def markdown(result: dict, rows: list[Row], args) -> str:
    c = result["cpu"]
    out = [
        f"CPU: {c.get('Model name', '?')} ({c.get('CPU(s)', '?')} CPUs, "
        f"{c.get('Hypervisor vendor', 'no')} hypervisor; flags {', '.join(c.get('flags', []))}), "
        f"{args.threads} threads; commit {result['commit']}; "
        f"{result['sentences']} sentences of {args.src_file}, --batch-tokens {args.batch_tokens}, "
        f"alpha {args.alpha}",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r, ratio in zip(rows, ratios(rows, result["teacher"])):
        out.append("| " + " | ".join(cells(r, ratio, args.threads)) + " |")
    if result["goals"]:
        out += [""] + [f"- {g}" for g in result["goals"]]
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model", action="append", required=True, help="NAME=CKPT[,CKPT...]; the first: the teacher"
    )
    p.add_argument("--src-file", required=True)
    p.add_argument("--ref-file", required=True)
    p.add_argument("--shortlist", help="an `nmt shortlist` file: every row also runs with it")
    p.add_argument("--engines", default="torch,ctranslate2")
    p.add_argument("--precisions", default="fp32,int8")
    p.add_argument("--beams", default="4,1")
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--batch-tokens", type=int, default=2048)
    p.add_argument(
        "--max-len-b", type=int, default=50, help="outputs of at most |x| + B pieces (as nmt translate)"
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=0, help="the first N test sentences (0: all)")
    p.add_argument("--warmup", type=int, default=0, help="sentences searched before timing a row (0: all)")
    p.add_argument(
        "--repeat", type=int, default=1, help="rounds (each engine in a fresh process), keep the fastest"
    )
    p.add_argument(
        "--stopping",
        default="exact",
        choices=("exact", "fast"),
        help="nmt's beam search stopping rule (exact: the paper's, nmt's default; fast: CTranslate2's)",
    )
    p.add_argument("--json", help="write the rows and the machine here")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args()
    torch.set_num_threads(args.threads)  # CTranslate2's engine takes torch's thread count too
    models = parse_models(args.model)
    lines, refs = list(read_lines(args.src_file)), list(read_lines(args.ref_file))
    if args.limit:
        lines, refs = lines[: args.limit], refs[: args.limit]
    rows = measure_all(args, models, (lines, refs))
    teacher = next(iter(models))
    result = {
        "cpu": cpu(),
        "commit": commit(),
        "teacher": teacher,
        "sentences": len(lines),
        "threads": args.threads,
    }
    result["settings"] = {k: v for k, v in vars(args).items() if k not in ("json", "markdown")}
    result["measurements"] = [
        {
            **asdict(r.setting),
            "layers": r.layers,
            "bleu": r.bleu,
            "seconds": r.seconds,
            "sentences": r.sentences,
            "words": r.words,
            "skipped": r.skipped,
        }
        for r in rows
    ]
    result["goals"] = goals(rows, teacher, args.stopping)
    table = markdown(result, rows, args)
    c = result["cpu"]
    result.update(  # the fields scripts/figures.py reads from a results/speed table
        what=f"the speed-quality table: {', '.join(models)} on {len(lines)} sentences of "
        + public_command(f" {args.src_file}", (str(data_dir()),)).strip(),
        command=command_line("speed_quality"),
        cpu_detail=f"{c.get('Model name', '?')} ({c.get('Hypervisor vendor', 'no')} hypervisor; "
        f"flags {', '.join(c.get('flags', []))})",
        cpu_path=cpu_path(),  # the ISA variables forced (ATEN_CPU_CAPABILITY, ...) and torch's kernels
        torch=torch.__version__,
        date=time.strftime("%Y-%m-%d"),
        timing=f"search only (token ids in and out, benchmarks/decode_timing.py: each engine in its own "
        f"process), each row after the same search untimed ({args.warmup or 'every'} sentences), "
        f"the fastest of {args.repeat} rounds; "
        f"--batch-tokens {args.batch_tokens}; nmt's stopping rule {args.stopping}",
        source="this file, written by benchmarks/speed_quality.py --json",
        models=describe(models),
        columns=list(COLUMNS),
        rows=[cells(r, ratio, args.threads) for r, ratio in zip(rows, ratios(rows, teacher))],
    )
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
