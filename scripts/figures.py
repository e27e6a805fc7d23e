"""Write the published figures into the pages from the committed result files under results/.

    python scripts/figures.py            # rewrite every generated block
    python scripts/figures.py --check    # exit 1 naming each block that differs (tests run this)

A page holds each generated block between `<!-- figures:NAME -->` and `<!-- /figures:NAME -->`;
only those lines are rewritten. Every figure is read from a file under results/ (scores, logs,
metrics.jsonl.gz, and the benchmark tables kept as JSON in results/speed/), and each carries the
CPU, the precision, the search (stopping rule) or benchmark, the commit and the date it comes from.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures_speed import (  # noqa: E402
    DEMO_SPEED,
    SCOPE_RUNS,
    best_of_threads,
    bulk_translate,
    ct2_base,
    ct2_forced,
    ct2_today,
    glossary,
    gpu_row_glance,
    gpu_summary,
    gpu_table,
    guards,
    import_marian,
    int8_kernels,
    listed_over_teacher,
    pick,
    quality,
    serve_attacks,
    serve_load,
    serve_shortlist,
    serve_summary,
    shortlist,
    shortlist_gain,
    shortlist_scope,
    spans,
    speed_quality,
    speed_quality_pairs,
    speed_summary,
    tag_placement,
    train_processes,
    train_speed,
)
from result_files import (  # noqa: E402
    RESULTS,
    ROOT,
    FigureError,
    Score,
    cell,
    cpu_kind,
    f1,
    load_json,
    median_train_rate,
    run_of,
    score,
    shown,
    speed_table,
    stopped,
    table,
)

PAGES = (
    "README.md",
    "docs/results.md",
    "docs/performance.md",
    "docs/serving.md",
    "docs/translation.md",
    "docs/importing.md",
    "docs/training.md",
    "docs/gpu.md",
    "results/speed/README.md",
)
BLOCK = re.compile(r"<!-- figures:([\w-]+) -->\n(.*?)<!-- /figures:\1 -->", re.DOTALL)
MARKER = re.compile(r"<!-- /?figures:([\w-]+) -->")
M30K = "results/multi30k-30min"
TEST_HEADER = "== test2016"


def best_row(tune: dict) -> dict:
    """The row of an `nmt tune-alpha --out` JSON at its chosen alpha (and rerank weight)."""
    weight = tune.get("best_rerank_weight")
    return next(
        r
        for r in tune["rows"]
        if r["alpha"] == tune["best_alpha"] and (weight is None or r.get("rerank_weight") == weight)
    )


def updates(path: Path) -> str:
    return f"{stopped(path)[0]:,}"


# --- the runs ---------------------------------------------------------------------------------


def demo(log: str) -> tuple[Score, str, str]:
    s = score(RESULTS / "demo" / log, after=TEST_HEADER)
    return s, run_of("demo", log).label(s.search), updates(RESULTS / "demo" / log)


def recipe30(key: str) -> tuple[Score, Score, str]:
    log = RESULTS / "multi30k-30min" / key / "recipe.log"
    test = score(log, after=TEST_HEADER)
    return test, score(log, after="== valid, average"), run_of("multi30k-30min", key).label(test.search)


def ensemble60() -> tuple[Score, float, str]:
    test = score(RESULTS / "multi30k-60min-ensemble/recipe-60.log", after=TEST_HEADER)
    valid = best_row(load_json(RESULTS / "multi30k-60min-ensemble/alpha.json"))["bleu"]
    return test, valid, run_of("multi30k-60min-ensemble").label(test.search)


def mbr() -> tuple[Score, float, str]:
    tune = load_json(RESULTS / "multi30k-decoding/mbr/alpha-beam8-mbr.json")
    test = score(RESULTS / "multi30k-decoding/mbr/test.score.txt")
    search = f"beam {tune['beam']}, alpha {tune['best_alpha']}, MBR {tune['mbr']['utility']}"
    return test, best_row(tune)["bleu"], run_of("multi30k-decoding", "mbr").label(search)


def bidirectional() -> tuple[Score, float, str]:
    tune = load_json(RESULTS / "multi30k-decoding/bidirectional/tune.beam8.json")
    test = score(RESULTS / "multi30k-decoding/bidirectional/test.bidi.score.txt")
    search = (
        f"beam {tune['beam']}, alpha {tune['best_alpha']}, exact, reranked (w {tune['best_rerank_weight']})"
    )
    return test, best_row(tune)["bleu"], run_of("multi30k-decoding", "bidirectional").label(search)


def libreoffice(direction: str) -> tuple[Score, Score, str]:
    test = score(
        RESULTS / "libreoffice-zh-en/eval.log",
        after=f"== LibreOffice help test ({direction.replace('-', '->')})",
    )
    valid = score(RESULTS / "libreoffice-zh-en" / direction / "recipe.log", after="== valid, average")
    return test, valid, run_of("libreoffice-zh-en", direction).label(test.search)


# --- README.md -------------------------------------------------------------------------------


def glance() -> str:
    zen5, zen5_run, zen5_updates = demo("zen5-avx512.log")
    avx2, avx2_run, avx2_updates = demo("avx2-fp32.log")
    amx, _, amx_run = recipe30("xeon-amx")
    ens, _, ens_run = ensemble60()
    zh, _, zh_run = libreoffice("zh-en")
    en, _, _ = libreoffice("en-zh")
    parse = f1(RESULTS / "ptb-parse/per-word-copy/test.score.txt")
    _, parse_min = stopped(RESULTS / "ptb-parse/per-word-copy/train.log")
    rows3 = sorted(p.parent.name for p in (RESULTS / "table3").glob("*/result.json"))
    two, one = (speed_table(name) for name in DEMO_SPEED)

    def ratio(t: dict) -> str:
        return cell(t, "vs CT2", decoder="nmt", precision="fp32", beam="4", stopping="exact")

    def slower(two: dict, one: dict) -> str:
        rates = [
            float(cell(t, "sent/s", decoder="CTranslate2 4.8.5", precision="fp32", beam="1"))
            for t in (two, one)
        ]
        return f" (CTranslate2 greedy: {rates[0]:.0f} sent/s at 2 threads, {rates[1]:.0f} at 1)"

    real, _ = median_train_rate(RESULTS / "multi30k-30min/zen5/metrics.jsonl.gz")
    real_amx, _ = median_train_rate(RESULTS / "multi30k-30min/xeon-amx/metrics.jsonl.gz")
    synth = next(r for r in speed_table("train-speed")["rows"] if r["cpu"] == "Zen 5")
    speed_cmd = (
        "`python benchmarks/translate_speed.py --checkpoint RUN/average "
        "--src-file $NMT_DATA_DIR/multi30k/test.en.gz --threads 2`"
    )
    rows = [
        [
            "demo: Multi30k en->de, 13 min of training",
            "`make demo`",
            f"test2016 **{zen5.bleu:.2f}** BLEU ({zen5_updates} "
            f"updates); {avx2.bleu:.2f} on an AVX2-only CPU "
            f"({avx2_updates} updates)",
            f"{zen5_run}; {avx2_run}",
            "[results/demo/](results/demo/README.md)",
        ],
        [
            "Multi30k en->de, 30 minutes, one model",
            "`make recipe`",
            f"test2016 **{amx.bleu:.2f}** BLEU, chrF {amx.chrf:.2f}",
            amx_run,
            "[results/multi30k-30min/](results/multi30k-30min/README.md)",
        ],
        [
            "Multi30k en->de, 60 minutes, two-model ensemble",
            "`make recipe-60`",
            f"test2016 **{ens.bleu:.2f}** BLEU, chrF {ens.chrf:.2f}",
            ens_run,
            "[results/multi30k-60min-ensemble/](results/multi30k-60min-ensemble/README.md)",
        ],
        [
            "Chinese <-> English, LibreOffice help, 60 min each",
            "`make recipe-libreoffice`",
            f"test zh->en **{zh.bleu:.2f}**, en->zh **{en.bleu:.2f}** BLEU",
            zh_run,
            "[results/libreoffice-zh-en/](results/libreoffice-zh-en/README.md)",
        ],
        [
            "constituency parsing, WSJ sample (section 6.3)",
            "`make recipe-parse`",
            f"test F1 **{parse:.2f}** in {parse_min:.0f} min (paper, full WSJ: 91.3)",
            run_of("ptb-parse", "per-word-copy").label("beam 21, alpha 0.3, exact"),
            "[results/ptb-parse/](results/ptb-parse/README.md)",
        ],
        [
            "Table 3 model variations, 700 updates per row",
            "`nmt variations ...`",
            f"{len(rows3)} rows (base and {len(rows3) - 1} "
            "variations); where the paper's claims hold at this scale",
            run_of("table3").label(),
            "[results/table3/](results/table3/README.md)",
        ],
        [
            "decoding speed against CTranslate2 4.8.5, the demo recipe's model, each engine in its own "
            "process",
            speed_cmd,
            f"nmt / CTranslate2, each at its faster thread count: {best_of_threads([two, one])}. At equal "
            f"threads, fp32 beam 4 (exact stop): {ratio(two)}x at 2, {ratio(one)}x at 1{slower(two, one)}",
            f"{two['cpu_detail']}, fp32 / int8, {two['commit']}, {two['date']}",
            "[results/speed/](results/speed/README.md)",
        ],
        distilled_row(),
        trust_row(),
        [
            "training speed, recipe model",
            "`make recipe` (`metrics.jsonl`)",
            f"**{real:,.0f}** target tok/s, median of the 30-minute run (Zen 5, bf16); {real_amx:,.0f} (AMX, "
            "bf16); one synthetic 2,025-token batch "
            f"(`benchmarks/train_speed.py`): {synth['bf16'][0]} (Zen 5)",
            f"{run_of('multi30k-30min', 'zen5').label()}; {run_of('multi30k-30min', 'xeon-amx').label()}",
            "[results/speed/](results/speed/README.md)",
        ],
        gpu_row_glance(),
    ]
    return table(
        ["what", "command", "result", "measured on (CPU, precision, search, commit, date)", "folder"], rows
    )


# --- docs/results.md -------------------------------------------------------------------------


def shrunk_shape(log: Path) -> tuple[int, int, int]:
    """(encoder layers, decoder layers, d_ff) of the student `nmt distill --shrink` wrote, as its log
    says ("the teacher shrunk to 3 encoder and 1 decoder layers, d_ff 256")."""
    found = re.findall(r"shrunk to (\d+) encoder and (\d+) decoder layers, d_ff (\d+)", log.read_text())
    if not found:
        raise FigureError(f"{log}: no 'shrunk to N encoder and N decoder layers, d_ff N' line")
    return tuple(map(int, found[-1]))


def distilled_row() -> list[str]:
    """The glance row of the speed-quality run: the shrunk student against its teacher and against
    CTranslate2, each ratio at equal settings or saying what differs."""
    t = speed_table("speed-quality")
    pairs = speed_quality_pairs(t)
    fp32 = pick(pairs, "student / teacher", "fp32", 4)
    listed = pick(pairs, "student with its shortlist / teacher", "fp32", 4)  # each batch's union
    own = speed_table(SCOPE_RUNS[1][1])  # test2016, each sentence over its own list (the default)
    own_speed, own_bleu, _ = listed_over_teacher(own, "student", "fp32")
    greedy8, beam8 = (pick(pairs, "nmt / CTranslate2", "int8", beam) for beam in (1, 4))
    teacher = f"{stopped(RESULTS / 'speed/distill/teacher.train.log')[0]:,}"
    student = f"{stopped(RESULTS / 'speed/distill/student-shrink.train.log')[0]:,}"
    enc, dec, d_ff = shrunk_shape(RESULTS / "speed/distill/distill-shrink.log")
    return [
        f"a distilled student ({enc} + {dec} layers, d_ff {d_ff}) shrunk from the {teacher}-update demo "
        f"model, then trained {student} updates more than its teacher",
        f"`nmt distill TEACHER --out OUT --shrink --model.n_decoder_layers={dec} --model.d_ff={d_ff} "
        "--train.max_steps=2000 --train.max_time=0`; " + shown(t["command"]),
        f"test2016 **{fp32.bleu[0]:.2f}** BLEU against the teacher's {fp32.bleu[1]:.2f} (the extra "
        f"updates, not distillation alone); {fp32.same}, both models: **{fp32.ratio:.2f}x** the "
        f"teacher's sentences/s; with the shortlist `nmt distill` writes (the teacher without), each "
        f"sentence over its own list: **{own_speed:.2f}x** at {own_bleu:.2f} BLEU ({own['commit']}; over "
        f"each batch's union {listed.ratio:.2f}x at {listed.bleu[0]:.2f}). nmt / CTranslate2 on the same "
        "student, "
        f"same precision, search and threads: int8 greedy {greedy8.ratio:.2f}x, int8 beam 4 "
        f"{beam8.ratio:.2f}x (each engine's stopping rule)",
        f"{cpu_kind(t['cpu_detail'])}, fp32 / int8, {t['commit']}, {t['date']}",
        "[results/speed/](results/speed/README.md)",
    ]


def trust_row() -> list[str]:
    """The glance row of the confidence, guards and spans runs (results/multi30k-decoding/quality)."""
    folder = RESULTS / "multi30k-decoding" / "quality"
    q, sp = load_json(folder / "test2016.json"), load_json(folder / "spans.json")
    _, _, rho, caught, flagged = q["rows"][0]
    loops, clauses, caps = (r[2] for r in q["guard_rows"])
    clean, on = sp["rows"][0], sp["rows"][1]
    return [
        "trust: confidence, guards, protected spans (demo model, calibrated on valid)",
        "`nmt calibrate`; `nmt translate --quality FILE`; `python benchmarks/quality.py`, "
        "`benchmarks/spans.py`",
        f"test2016: confidence's Spearman with sentence chrF **{rho}** (the 10% least confident hold "
        f"{caught} of the 10% worst); {flagged} of its own outputs flagged; caught: {loops} of forced loops, "
        f"{clauses} of dropped clauses, {caps} of ALL CAPS without recasing; spans kept **{on[1]}**, "
        f"BLEU around them {on[2]} against {clean[2]} clean",
        f"{cpu_kind(q['cpu_detail'])}, fp32, beam 4, {q['commit']}, {q['date']}",
        "[results/multi30k-decoding/quality/](results/multi30k-decoding/quality/README.md)",
    ]


def translation() -> str:
    rows = []
    for log, note in [
        ("zen5-avx512.log", ""),
        ("zen4.log", ""),
        ("xeon-fp32.log", " (fresh clone)"),
        ("xeon-avx512bf16-fp32.log", " (fresh clone; bf16 measured slower, `auto` took float32)"),
        ("xeon-avx512bf16-bf16.log", " (fresh clone; `auto` trusting the CPU flag, before it measured)"),
        ("avx2-fp32.log", ""),
    ]:
        s, run, n = demo(log)
        bleu = f"**{s.bleu:.2f}**" if log.startswith("zen5") else f"{s.bleu:.2f}"
        rows.append(
            [
                "Multi30k en->de test2016, the demo",
                f"`make demo`{note}",
                run,
                f"13 min, {n} updates",
                "-",
                bleu,
                f"{s.chrf:.2f}",
                "`results/demo/`",
            ]
        )
    for key, cmd in [
        ("xeon-amx", "`make recipe`"),
        ("zen5", "`make recipe` (then at dropout 0.2, alpha 0.6)"),
    ]:
        test, valid, run = recipe30(key)
        n = updates(RESULTS / "multi30k-30min" / key / "train.log")
        bleu = f"**{test.bleu:.2f}**" if key == "xeon-amx" else f"{test.bleu:.2f}"
        rows.append(
            [
                "Multi30k en->de test2016, one model",
                cmd,
                run,
                f"30 min, {n} updates",
                f"{valid.bleu:.2f}",
                bleu,
                f"{test.chrf:.2f}",
                f"`{M30K}/{key}/`",
            ]
        )
    test, valid, run = ensemble60()
    n = " + ".join(updates(RESULTS / f"multi30k-60min-ensemble/seed{i}/train.log") for i in (1, 2))
    rows.append(
        [
            "Multi30k en->de test2016, two-model ensemble",
            "`make recipe-60`",
            run,
            f"2 x 60 min side by side, one core each, {n} updates",
            f"{valid:.2f}",
            f"**{test.bleu:.2f}**",
            f"{test.chrf:.2f}",
            "`results/multi30k-60min-ensemble/`",
        ]
    )
    test, valid, run = mbr()
    rows.append(
        [
            "Multi30k en->de test2016, MBR decoding (chrF utility) of another two-model ensemble",
            "`nmt translate SEED1 SEED2 --beam 8 --alpha 1.0 --mbr`",
            run,
            "2 x 30 min one after the other (dropout 0.2, `make recipe-60` of 2026-11-24), 13,001 + 12,750 "
            "updates",
            f"{valid:.2f}",
            f"{test.bleu:.2f}",
            f"**{test.chrf:.2f}**",
            "`results/multi30k-decoding/mbr/`",
        ]
    )
    test, valid, run = bidirectional()
    d = RESULTS / "multi30k-decoding/bidirectional"
    n = f"{updates(d / 'l2r-seed1/train.log')} + {updates(d / 'r2l-seed2/train.log')}"
    rows.append(
        [
            "Multi30k en->de test2016, a left-to-right model reranked by a right-to-left one",
            "`recipes/multi30k-en-de-bidirectional.sh`'s procedure, its two runs one after the other",
            run,
            f"2 x 30 min one after the other on both cores, {n} updates",
            f"{valid:.2f}",
            f"{test.bleu:.2f}",
            f"{test.chrf:.2f}",
            "`results/multi30k-decoding/bidirectional/`",
        ]
    )
    for direction, n_test, tok in [("zh-en", "2,015", ""), ("en-zh", "2,015", ", `tok:zh`")]:
        test, valid, run = libreoffice(direction)
        n = updates(RESULTS / "libreoffice-zh-en" / direction / "train.log")
        rows.append(
            [
                f"LibreOffice help {direction.replace('-', '->')} test ({n_test}){tok}",
                f"`make recipe-libreoffice-{direction}`",
                run,
                f"60 min on one core, {n} updates",
                f"{valid.bleu:.2f}",
                f"**{test.bleu:.2f}**",
                f"{test.chrf:.2f}",
                f"`results/libreoffice-zh-en/{direction}/`",
            ]
        )
    ft = RESULTS / "finetune-libreoffice"
    adapted, scratch = load_json(ft / "libreoffice.adapted.json"), load_json(ft / "libreoffice.scratch.json")
    before, after = load_json(ft / "multi30k.base.json"), load_json(ft / "multi30k.adapted.json")
    rows.append(
        [
            "LibreOffice help en->de test (3,036), a 1,093-update `make demo` checkpoint (not the published "
            "demo) adapted with `--init`",
            "`MINUTES=6 sh recipes/finetune-libreoffice-en-de.sh runs/demo/average`",
            run_of("finetune-libreoffice").label("beam 4, alpha 0.6, exact"),
            f"6 min, {updates(ft / 'adapted-train.log')} updates (scratch, same minutes: "
            f"{scratch['bleu']:.2f}; Multi30k test2016 {before['bleu']:.2f} before adapting, "
            f"{after['bleu']:.2f} after)",
            "-",
            f"**{adapted['bleu']:.2f}**",
            f"{adapted['chrf']:.2f}",
            "`results/finetune-libreoffice/`",
        ]
    )
    columns = [
        "task",
        "command",
        "measured on (CPU, precision, search, commit, date)",
        "training",
        "valid BLEU",
        "test BLEU",
        "chrF",
        "folder",
    ]
    return table(columns, rows)


def averaging_gain(recipe_log: Path) -> tuple[float, float, float]:
    avg = score(recipe_log, after="== valid, average")
    best = score(recipe_log, after="== valid, run/checkpoints/best")
    return avg.bleu, best.bleu, avg.bleu - best.bleu


def notes() -> str:
    gains = []
    for path, what in [
        (RESULTS / "multi30k-30min/zen5/recipe.log", "Zen 5, 30 min"),
        (RESULTS / "multi30k-30min/xeon-amx/recipe.log", "AMX, 30 min"),
        (RESULTS / "multi30k-decoding/bidirectional/l2r-seed1/recipe.log", "Zen 4, 30 min, seed 1"),
        (RESULTS / "multi30k-decoding/bidirectional/l2r-seed2/recipe.log", "Zen 4, 30 min, seed 2"),
        (RESULTS / "multi30k-60min-ensemble/seed1/recipe.log", "AMX, 60 min on one core, seed 1"),
        (RESULTS / "multi30k-60min-ensemble/seed2/recipe.log", "AMX, 60 min on one core, seed 2"),
    ]:
        avg, best, gain = averaging_gain(path)
        gains.append(f"{gain:+.2f} ({what}: {avg:.2f} against {best:.2f})")
    members = [
        score(RESULTS / f"multi30k-60min-ensemble/seed{i}/recipe.log", after=TEST_HEADER) for i in (1, 2)
    ]
    valid_members = [score(RESULTS / f"multi30k-60min-ensemble/seed{i}/recipe.log") for i in (1, 2)]
    ens_valid = next(
        r for r in load_json(RESULTS / "multi30k-60min-ensemble/alpha.json")["rows"] if r["alpha"] == 0.6
    )
    zen4 = [
        score(RESULTS / f"multi30k-decoding/bidirectional/l2r-seed{i}/recipe.log", after=TEST_HEADER)
        for i in (1, 2)
    ]
    zh = score(RESULTS / "libreoffice-zh-en/eval.log", after="== LibreOffice help test (zh->en)")
    en = score(RESULTS / "libreoffice-zh-en/eval.log", after="== LibreOffice help test (en->zh)")
    news = score(RESULTS / "libreoffice-zh-en/eval.log", after="== WMT newstest2018")
    lines = [
        "- Checkpoint averaging (the last 5) against the best "
        "single checkpoint, valid BLEU at the same alpha: " + "; ".join(gains) + ".",
        f"- Two seeds of one recipe on test2016: {members[0].bleu:.2f} "
        f"/ {members[1].bleu:.2f} (AMX, 60 min), "
        f"{zen4[0].bleu:.2f} / {zen4[1].bleu:.2f} (Zen 4, 30 "
        "min): differences under ~1.2 BLEU between single "
        "runs are within seed noise.",
        f"- The two-model ensemble of `make recipe-60` against its members, valid at alpha 0.6: "
        f"{ens_valid['bleu']:.2f} against {valid_members[0].bleu:.2f} / {valid_members[1].bleu:.2f} "
        f"({ens_valid['bleu'] - valid_members[0].bleu:+.2f} / "
        f"{ens_valid['bleu'] - valid_members[1].bleu:+.2f}).",
        f"- LibreOffice help: the zh->en model scores {news.bleu:.2f} BLEU on WMT newstest2018 (news, out of "
        f"domain); brevity penalty on test {zh.bp:.2f} (zh->en) and {en.bp:.2f} (en->zh).",
    ]
    return "\n".join(lines) + "\n"


def experiments() -> str:
    base = load_json(RESULTS / "table3/base/result.json")["dev_bleu"]
    seeds = [base] + [
        load_json(RESULTS / f"table3/seeds/base-seed{i}/result.json")["dev_bleu"] for i in (2, 3)
    ]
    mean = sum(seeds) / len(seeds)
    sd = (sum((x - mean) ** 2 for x in seeds) / (len(seeds) - 1)) ** 0.5
    n_rows = len(list((RESULTS / "table3").glob("*/result.json"))) - 1
    parse = f1(RESULTS / "ptb-parse/per-word-copy/test.score.txt")
    paper = f1(RESULTS / "ptb-parse/paper-setting/test.score.txt")
    _, minutes = stopped(RESULTS / "ptb-parse/per-word-copy/train.log")
    rows = [
        [
            "Table 3 model variations, Multi30k, 700 updates per row",
            "`nmt variations data/m30 --out runs/table3 --steps 700 --base-config results/table3/base.yaml`",
            run_of("table3").label("beam 4, alpha 0.6, exact"),
            f"{n_rows + 1} rows (base and {n_rows} variations); "
            f"base dev BLEU {base:.2f} (3 seeds: sd {sd:.2f}); see "
            "[the table](experiments.md#table-3-nmt-variations)",
            "`results/table3/`",
        ],
        [
            "constituency parsing, WSJ sample of the Penn Treebank",
            "`make recipe-parse`",
            run_of("ptb-parse", "per-word-copy").label("beam 21, alpha 0.3, exact"),
            f"test F1 **{parse:.2f}** in {minutes:.0f} min (the "
            f"paper's linearisation: {paper:.2f}; the paper, WSJ "
            "only, 40K sentences: 91.3)",
            "`results/ptb-parse/`",
        ],
    ]
    return table(
        ["experiment", "command", "measured on (CPU, precision, search, commit, date)", "result", "folder"],
        rows,
    )


def finetune_replay() -> str:
    """recipe-finetune's scores: the start, plain fine-tuning and replay with the guard, on both test
    sets, and the goal (recipes/lib/adaptation.py scores)."""
    rows, notes = [], []
    for run in ("replay-guard", "replay-guard-lr"):
        folder = RESULTS / "finetune-libreoffice" / run
        if not (folder / "scores.json").is_file():
            continue
        t = load_json(folder / "scores.json")
        scores, settings, goal = t["scores"], t["settings"], t["goal"]
        imported = " (an import's: warm-up 4,000, lr_scale 1)" if settings["ROUNDTRIP"] == "1" else ""
        train = settings["TRAIN_ARGS"] or f"the start's schedule{imported}"
        for model in ("start", "adapted", "guarded"):
            lo, m30k = scores[model]["libreoffice"], scores[model]["multi30k"]
            rows.append(
                [
                    train if model == "start" else "",
                    model,
                    f"{lo['bleu']:.2f}",
                    f"{lo['chrf']:.2f}",
                    f"{m30k['bleu']:.2f}",
                    f"{m30k['chrf']:.2f}",
                ]
            )
        notes.append(
            f"{train}: the guarded run keeps {goal['libreoffice_gain_kept']:.0%} of plain fine-tuning's "
            f"LibreOffice gain and loses {goal['multi30k_bleu_lost']:.2f} Multi30k BLEU "
            f"(goal: {goal['goal']}: {'met' if goal['met'] else 'not met'})"
        )
    run = run_of("finetune-libreoffice", "replay-guard")
    return (
        table(["training settings", "model", "LibreOffice test BLEU", "chrF", "test2016 BLEU", "chrF"], rows)
        + "\n"
        + "; ".join(notes)
        + f". {run.label('beam 4, alpha 0.6, exact')}. From: `results/finetune-libreoffice/replay-guard*/`.\n"
    )


def multilingual() -> str:
    """One model for en->de, fr, cs against three bilingual ones of the same total compute."""
    t = load_json(RESULTS / "multilingual/table.json")
    return (
        table(t["columns"], t["rows"])
        + "\n"
        + f"CPU: 2 cores, {t['cpu_detail']}; torch {t['torch']}, {t['threads']}; {t['precision']}; "
        f"{t['search']}; commit {t['commit']}, {t['date']}. Command: {shown(t['command'])}. "
        f"{t['timing']}. From: `results/multilingual/`.\n"
    )


BLOCKS: dict[str, Callable[[], str]] = {
    "glance": glance,
    "translation": translation,
    "results-notes": notes,
    "experiments": experiments,
    "multilingual": multilingual,
    "speed-summary": speed_summary,
    "train-speed": train_speed,
    "train-processes": train_processes,
    "translate-ct2-today": ct2_today,
    "translate-ct2-forced": ct2_forced,
    "int8-kernels": int8_kernels,
    "translate-ct2-base": ct2_base,
    "shortlist-demo": shortlist("shortlist-demo"),
    "shortlist-base": shortlist("shortlist-base"),
    "shortlist-gain": shortlist_gain,
    "serve-load": serve_load,
    "serve-summary": serve_summary,
    "serve-attacks": serve_attacks,
    "glossary": glossary,
    "quality": quality,
    "guards": guards,
    "spans": spans,
    "tag-placement": tag_placement(),
    "tag-placement-en-zh": tag_placement("tags-heldout-en-zh"),
    "import-marian": import_marian,
    "bulk-translate": bulk_translate,
    "finetune-replay": finetune_replay,
    "speed-quality": speed_quality,
    "gpu-h200": gpu_table,
    "gpu-summary": gpu_summary,
    "shortlist-scope": shortlist_scope,
    "serve-shortlist": serve_shortlist,
}


# --- the pages -------------------------------------------------------------------------------


def fill(page: str, text: str, rendered: dict[str, str]) -> str:
    """`text` with each generated block replaced by its rendering (kept in `rendered` for other pages).

    A marker naming no known block, or one without its partner, is an error naming the page and line.
    """
    blocks = list(BLOCK.finditer(text))
    for m in MARKER.finditer(text):
        where = f"{page}:{text.count(chr(10), 0, m.start()) + 1}"
        if m.group(1) not in BLOCKS:
            raise FigureError(f"{where}: unknown block {m.group(1)!r} (known: {', '.join(BLOCKS)})")
        if not any(b.start() == m.start() or b.end() == m.end() for b in blocks):
            raise FigureError(f"{where}: {m.group(0)} has no matching start or end marker")

    def replace(b: re.Match) -> str:
        name = b.group(1)
        if name not in rendered:
            rendered[name] = BLOCKS[name]()
        return f"<!-- figures:{name} -->\n{rendered[name]}<!-- /figures:{name} -->"

    return BLOCK.sub(replace, text)


def stale(texts: Mapping[str, str]) -> list[str]:
    """What differs from the result files: 'PAGE: block NAME' for each generated block whose text does
    not match, and 'block NAME: on no page' for each block that no page holds."""
    rendered: dict[str, str] = {}
    out = []
    for page, text in texts.items():
        fill(page, text, rendered)
        old_blocks = {b.group(1): b.group(2) for b in BLOCK.finditer(text)}
        out += [f"{page}: block {name}" for name, body in old_blocks.items() if rendered[name] != body]
    out += [f"block {name}: on no page" for name in BLOCKS if name not in rendered]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--check", action="store_true", help="compare the pages with the result files, write nothing"
    )
    args = ap.parse_args(argv)
    texts = {page: (ROOT / page).read_text(encoding="utf-8") for page in PAGES}
    try:
        if args.check:
            bad = stale(texts)
            for b in bad:
                print(f"{b}: differs from the result files; run `python scripts/figures.py`", file=sys.stderr)
            return 1 if bad else 0
        rendered: dict[str, str] = {}
        for page, text in texts.items():
            new = fill(page, text, rendered)
            if new != text:
                (ROOT / page).write_text(new, encoding="utf-8")
                print(f"wrote {page}")
    except FigureError as e:
        print(f"figures: error: {e}", file=sys.stderr)
        return 2
    missing = [name for name in BLOCKS if name not in rendered]
    if missing:
        print(f"figures: error: blocks on no page: {', '.join(missing)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
