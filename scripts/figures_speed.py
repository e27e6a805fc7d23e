"""The speed figures: the benchmark tables kept in results/speed/*.json and the training rate of real runs.

Each table is rendered as the benchmark printed it, followed by a line naming the CPU, torch, the
commit, the date, the command and where the table was first committed (`python scripts/figures.py`
writes them into docs/performance.md, docs/results.md and results/speed/README.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from result_files import (
    RESULTS,
    FigureError,
    cell,
    cpu_kind,
    load_json,
    median_train_rate,
    run_of,
    shown,
    speed_table,
    table,
)


def forced_path(t: dict) -> str:
    """The CPU code path a table's run was held to (benchmarks/machine.py cpu_path), or ""."""
    path = t.get("cpu_path") or {}
    if not path.get("forced"):
        return ""
    forced = ", ".join(f"{k}={v}" for k, v in path["forced"].items())
    return f"forced path: {forced} (torch kernels {path['torch_kernels']})"


def footnote(t: dict, extra: str = "") -> str:
    cpu = t.get("cpu_detail", t.get("cpu", ""))
    parts = [
        f"CPU: 2 cores, {cpu}",
        forced_path(t),
        f"torch {t['torch']}, {t['threads']} thread{'s' if t['threads'] > 1 else ''}" if "torch" in t else "",
        f"commit {t['commit']}, {t['date']}" if "commit" in t else "",
        extra,
    ]
    text = "; ".join(p for p in parts if p)
    return f"{text}. Command: {shown(t['command'])}. From: {t['source']}.\n"


def speed_summary() -> str:
    demo = speed_table(DEMO_SPEED[0])
    exact, fast = (
        cell(demo, "vs CT2", decoder="nmt", precision="fp32", beam="4", stopping=rule)
        for rule in ("exact", "fast")
    )
    greedy = cell(demo, "vs CT2", decoder="nmt", precision="fp32", beam="1")
    base = speed_table("translate-ct2-base")
    base4 = cell(base, "vs CT2", decoder="nmt", precision="fp32", beam="4")
    real, n = median_train_rate(RESULTS / "multi30k-30min/zen5/metrics.jsonl.gz")
    synth = next(r for r in speed_table("train-speed")["rows"] if r["cpu"] == "Zen 5")
    rows = [
        [
            f"decoding, the demo model, float32 beam 4 against CTranslate2 4.8.5, "
            f"{demo['threads']} threads each (on this VM CTranslate2 is faster at 1 thread)",
            f"{cpu_kind(demo['cpu_detail'])}, fp32, {demo['commit']}, {demo['date']}",
            f"**{exact}x** under nmt's default exact stopping; {fast}x with `--stopping fast`; "
            f"greedy {greedy}x; `base` (random weights, every output 30 tokens; {base['commit']}): {base4}x",
            "[Performance](performance.md#decoding-speed-against-ctranslate2)",
        ],
        [
            "training, recipe model, the 30-minute `make recipe` run",
            run_of("multi30k-30min", "zen5").label(),
            f"**{real:,.0f}** target tok/s (median of its {n:,} "
            "logged windows); one synthetic 2,025-token batch in "
            f"`benchmarks/train_speed.py`: {synth['bf16'][0]} (bf16), {synth['fp32'][0]} (fp32)",
            "[Performance](performance.md#training-speed-on-2-cpu-cores)",
        ],
    ]
    return table(["what", "measured on (CPU, precision, commit, date)", "figure", "page"], rows)


def train_speed() -> str:
    real = []
    for folder, what in [
        ("multi30k-30min/zen5", "`make recipe`, 30 min, both cores"),
        ("multi30k-30min/xeon-amx", "`make recipe`, 30 min, both cores"),
    ]:
        rate, n = median_train_rate(RESULTS / folder / "metrics.jsonl.gz")
        run = run_of(folder.split("/")[0], folder.split("/")[1])
        real.append(
            [
                run.cpu,
                what,
                run.precision,
                f"**{rate:,.0f}**",
                f"{n:,}",
                f"{run.commit}, {run.date}",
                f"`results/{folder}/metrics.jsonl.gz`",
            ]
        )
    for i in (1, 2):
        rate, n = median_train_rate(RESULTS / f"multi30k-60min-ensemble/seed{i}/metrics.jsonl.gz")
        run = run_of("multi30k-60min-ensemble")
        real.append(
            [
                run.cpu,
                f"`make recipe-60`, seed {i}: 60 min on one core, beside seed {3 - i}",
                run.precision,
                f"{rate:,.0f}",
                f"{n:,}",
                f"{run.commit}, {run.date}",
                f"`seed{i}/metrics.jsonl.gz` in `results/multi30k-60min-ensemble/`",
            ]
        )
    synth = speed_table("train-speed")
    rows = [
        [
            r["cpu"],
            " / ".join(r["fp32"]),
            " / ".join(r["bf16"]) or "- (emulated)",
            r["auto"],
            shown(r["command"]),
            f"{r['commit']}, {r['date']}",
        ]
        for r in synth["rows"]
    ]
    measured = [speed_table(name) for name in TRAIN_SPEED_RUNS]
    rows += [train_speed_row(t) for t in measured]
    return (
        "Real training runs (the median of `tgt_tokens_per_s` over the run's logged windows of 10 updates, "
        "real batches of ~1,024 target tokens, validation excluded):\n\n"
        + table(["CPU", "run", "precision", "target tok/s", "windows", "commit, date", "file"], real)
        + "\nThe benchmark (`benchmarks/train_speed.py`): "
        + synth["what"]
        + "; twice the recipe's update, "
        "so its rate is above what a run sustains. Each figure is one run of the script:\n\n"
        + table(
            ["CPU", "fp32 target tok/s", "bf16 target tok/s", "`auto` trains in", "command", "commit, date"],
            rows,
        )
        + f"\nFrom: the first {len(synth['rows'])} rows, {synth['source']} (transcribed); "
        + "; ".join(
            f"the {cpu_kind(t['cpu_detail'])} row, {t['source']} (`{name}.json`)"
            for name, t in zip(TRAIN_SPEED_RUNS, measured)
        )
        + ".\n"
    )


TRAIN_SPEED_RUNS = ("train-speed-xeon",)  # written by benchmarks/train_speed.py --json
TRAIN_PROCESSES_RUNS = ("train-processes-xeon",)  # written by benchmarks/train_processes.py --json


def train_speed_row(t: dict) -> list[str]:
    """The recipe model's (small) target tok/s in fp32 and bf16 (fused path) of one command-written run."""
    rates = {}
    for precision in ("fp32", "bf16"):
        cols = t["columns"]
        found = [
            r[cols.index("target tok/s")]
            for r in t["rows"]
            if r[cols.index("model")] == "small"
            and r[cols.index("precision")] == precision
            and r[cols.index("loss path")] == "fused"
        ]
        rates[precision] = " / ".join(found)
    return [
        cpu_kind(t["cpu_detail"]),
        rates["fp32"],
        rates["bf16"] or "- (emulated)",
        t["auto"],
        shown(t["command"]),
        f"{t['commit']}, {t['date']}",
    ]


def train_processes() -> str:
    t = speed_table("train-processes")
    rows = [
        [
            r["cpu"],
            " / ".join(r["one"]),
            " / ".join(r["two"]),
            f"**{r['gain']}x**",
            shown(r["command"]),
            f"{r['commit']}, {r['date']}",
        ]
        for r in t["rows"]
    ]
    measured = [speed_table(name) for name in TRAIN_PROCESSES_RUNS]
    rows += [train_processes_row(m) for m in measured]
    cols = [
        "CPU",
        "one process, 2 threads",
        "two processes, 1 thread each (sum)",
        "gain",
        "command",
        "commit, date",
    ]
    return (
        table(cols, rows)
        + f"\n{t['what']}. From: the first {len(t['rows'])} rows, {t['source']} (transcribed); "
        + "; ".join(
            f"the {cpu_kind(m['cpu_detail'])} row ({m['precision']}, {m['what']}), "
            f"{m['source']} (`{name}.json`)"
            for name, m in zip(TRAIN_PROCESSES_RUNS, measured)
        )
        + ".\n"
    )


def train_processes_row(t: dict) -> list[str]:
    """One command-written run of benchmarks/train_processes.py: the all-together rate of each round
    of one process on 2 threads and of two processes on one thread each, and the gain of their means."""
    cols = t["columns"]
    totals = {
        layout: [
            r[cols.index("all together")] for r in t["rows"] if r[cols.index("processes x threads")] == layout
        ]
        for layout in ("1x2", "2x1")
    }
    mean = {k: sum(float(v.replace(",", "")) for v in vs) / len(vs) for k, vs in totals.items()}
    return [
        cpu_kind(t["cpu_detail"]),
        " / ".join(totals["1x2"]),
        " / ".join(totals["2x1"]),
        f"**{mean['2x1'] / mean['1x2']:.2f}x**",
        shown(t["command"]),
        f"{t['commit']}, {t['date']}",
    ]


DEMO_SPEED = ("translate-ct2-demo-xeon", "translate-ct2-demo-xeon-1thread")  # 2 threads, 1 thread


def ct2_ratios(t: dict) -> str:
    """nmt / CTranslate2 at float32 and int8, beam 4 (both stopping rules) and greedy, of one table."""
    parts = []
    for precision in ("fp32", "int8"):
        exact, fast, greedy = (
            cell(t, "vs CT2", decoder="nmt", precision=precision, beam=b, **s)
            for b, s in (("4", {"stopping": "exact"}), ("4", {"stopping": "fast"}), ("1", {}))
        )
        parts.append(
            f"{precision} beam 4 **{exact}x** (exact stop), {fast}x (`--stopping fast`), greedy {greedy}x"
        )
    return "; ".join(parts)


def best_of_threads(tables: list[dict]) -> str:
    """nmt / CTranslate2 with each engine at the thread count at which it is fastest (sent/s over the
    tables, one per thread count, of one machine), per precision and search."""
    parts = []
    for precision, beam, stopping in (
        ("fp32", "4", "exact"),
        ("fp32", "1", ""),
        ("int8", "4", "exact"),
        ("int8", "1", ""),
    ):
        best = {}
        for t in tables:
            for engine, extra in (
                ("nmt", {"stopping": stopping} if stopping else {}),
                ("CTranslate2 4.8.5", {}),
            ):
                rate = float(cell(t, "sent/s", decoder=engine, precision=precision, beam=beam, **extra))
                if rate > best.get(engine, (0.0, 0))[0]:
                    best[engine] = (rate, t["threads"])
        (nmt, n), (ct2, c) = best["nmt"], best["CTranslate2 4.8.5"]
        search = "greedy" if beam == "1" else "beam 4"
        threads = f"nmt {n}, CTranslate2 {c} thread{'s' if c > 1 else ''}"
        parts.append(f"{precision} {search} **{nmt / ct2:.2f}x** ({threads})")
    return "; ".join(parts)


def thread_tables(names: tuple[str, ...]) -> str:
    """One machine's tables of the demo model, one per thread count, each with its ratios, after
    the ratios with each engine at its faster thread count (the commit in each footnote)."""
    tables = [speed_table(name) for name in names]
    out = [
        "Each engine at its faster thread count (nmt's default exact stop; the engines' sent/s of the "
        f"two tables below): {best_of_threads(tables)}.\n"
    ]
    for t in tables:
        out.append(
            f"{t['threads']} thread{'s' if t['threads'] > 1 else ''}, nmt / CTranslate2: {ct2_ratios(t)}.\n\n"
            + table(t["columns"], t["rows"])
            + "\n"
            + footnote(t, "model: " + t["model"] + "; " + t["timing"])
        )
    return "\n".join(out)


def ct2_today() -> str:
    """nmt against CTranslate2 on the make demo recipe's model, each engine in a process of its own,
    at 2 threads and at 1."""
    return thread_tables(DEMO_SPEED)


def ct2_base() -> str:
    t = speed_table("translate-ct2-base")
    return table(t["columns"], t["rows"]) + "\n" + footnote(t, t["model"] + "; " + t["timing"])


FORCED_SPEED = (  # the 2- and 1-thread tables' runs, every library held to AVX2
    "translate-ct2-demo-xeon-avx2",
    "translate-ct2-demo-xeon-avx2-1thread",
)


def ct2_forced() -> str:
    """The demo model's tables on this CPU held to another ISA's code path, at 2 threads and at 1
    (the footnotes name the variables and the kernels torch ran)."""
    return thread_tables(FORCED_SPEED)


INT8_KERNELS = ("int8-kernels-1thread", "int8-kernels-2threads", "int8-kernels-avx2-1thread")


def int8_kernels() -> str:
    """fbgemm's time over oneDNN's per int8 layer shape and row count (above 1: oneDNN faster), one
    line per shape and thread count, with the rows from which nmt takes oneDNN."""
    tables = [speed_table(name) for name in INT8_KERNELS]
    counts = list(dict.fromkeys(r[1] for r in tables[0]["rows"]))
    rows = []
    for t in tables:
        for shape in dict.fromkeys(r[0] for r in t["rows"]):
            mine = [r for r in t["rows"] if r[0] == shape]
            ratio = {r[1]: r[4] for r in mine}
            first = next((r[1] for r in mine if r[5] == "oneDNN"), "never")
            path = "AVX2 (forced)" if (t.get("cpu_path") or {}).get("forced") else "its own"
            rows.append([shape, path, str(t["threads"]), *[ratio.get(n, "") for n in counts], first])
    columns = ["weight (in x out)", "CPU path", "threads", *[f"{n} rows" for n in counts], "nmt: oneDNN from"]
    out = [table(columns, rows)]
    for t in tables:
        out.append(footnote(t, t["what"] + f"; activations over 8 bits: {t['full_range']}"))
    return "\n".join(out)


def shortlist(name: str) -> Callable[[], str]:
    def render() -> str:
        t = speed_table(name)
        return (
            table(t["columns"], t["rows"])
            + "\n"
            + footnote(t, f"{t['what']}; model: {t['model']}; {t['shortlist']}; {t['timing']}")
        )

    return render


def shortlist_gain() -> str:
    """nmt's speed with its shortlist over without, beam 4, from the demo table's sent/s."""
    t = speed_table("shortlist-demo")
    parts = []
    for precision in ("fp32", "int8"):
        for stopping in ("exact", "fast"):
            pair = [
                float(
                    cell(
                        t,
                        "sent/s",
                        decoder="nmt",
                        precision=precision,
                        beam="4",
                        stopping=stopping,
                        shortlist=s,
                    )
                )
                for s in ("no", "yes")
            ]
            parts.append(f"{precision} {stopping} {pair[1] / pair[0]:.2f}x")
    return (
        f"nmt with its shortlist over nmt without, beam 4, on {t['model']}: "
        + ", ".join(parts)
        + f" (sent/s of the table above; {t['cpu']}, {t['commit']}, {t['date']}).\n"
    )


def serve_load() -> str:
    t = speed_table("serve-load")
    b = t["baselines"]
    return (
        table(t["columns"], t["rows"])
        + "\n"
        + table(b["columns"], b["rows"])
        + "\n"
        + footnote(t, f"{t['precision']}; model: {t['model']}; {t['what']}")
    )


def serve_summary() -> str:
    """The load test in one sentence: dynamic batching's best throughput over offline translation,
    and its median latency at one client over a direct call's."""
    t = speed_table("serve-load")
    cols, base = t["columns"], t["baselines"]
    batched = [r for r in t["rows"] if r[cols.index("server")] == "dynamic batching"]
    best = max(batched, key=lambda r: float(r[cols.index("vs offline")].strip("*")))
    one = next(r for r in batched if r[cols.index("clients")] == "1")
    direct = next(r for r in base["rows"] if r[0].startswith("direct"))
    latency = float(one[cols.index("p50 ms")]) / float(direct[base["columns"].index("p50 ms")])
    return (
        f"At {best[cols.index('clients')]} concurrent one-sentence clients dynamic batching gives "
        f"{best[cols.index('vs offline')].strip('*')}x the throughput of offline translation of the same "
        f"sentences, and at one client the median latency is {latency:.2f}x a direct `Translator` call "
        f"({cpu_kind(t['cpu_detail'])}, {t['threads']} thread{'s' if t['threads'] > 1 else ''}, "
        f"{t['precision']}, model {t['model']}, commit {t['commit']}; the table is on the "
        "[Performance](performance.md#serving) page, `benchmarks/serve_load.py`).\n"
    )


@dataclass(frozen=True)
class Pair:
    """Two measurements of the speed-quality run at one precision and search that differ in what
    `differs` names, and the settings they share."""

    what: str  # "student / teacher", "nmt / CTranslate2", ...
    differs: str
    precision: str
    beam: int
    same: str
    speed: tuple[float, float]  # sentences/s of each side
    bleu: tuple[float, float]

    @property
    def ratio(self) -> float:
        return self.speed[0] / self.speed[1]


def measured(t: dict, **match) -> tuple[float, float]:
    """(sentences/s, BLEU) of the one measurement of a speed-quality JSON whose fields equal `match`."""
    rows = [m for m in t["measurements"] if not m["skipped"] and all(m[k] == v for k, v in match.items())]
    if len(rows) != 1:
        raise FigureError(f"results/speed/speed-quality.json: {len(rows)} measurements match {match}")
    return rows[0]["sentences"] / rows[0]["seconds"], rows[0]["bleu"]


def search_name(beam: int) -> str:
    return "greedy" if beam == 1 else f"beam {beam}"


def pair(t: dict, what: str, differs: str, sides: tuple[dict, dict], setting: tuple[str, int]) -> Pair:
    """The measurements `sides` (model and engine of each; a shortlist where a side says so) at `setting`
    (precision, beam)."""
    precision, beam = setting
    (a_speed, a_bleu), (b_speed, b_bleu) = [
        measured(t, precision=precision, beam=beam, **{"shortlist": False, **side}) for side in sides
    ]
    shared = [sides[0][k] for k in ("model", "engine") if sides[0][k] == sides[1][k]]
    shared = [{"torch": "nmt"}.get(s, s) for s in shared]
    same = ", ".join([*shared, precision, search_name(beam), f"{t['threads']} threads"])
    return Pair(what, differs, precision, beam, same, (a_speed, b_speed), (a_bleu, b_bleu))


def speed_quality_pairs(t: dict) -> list[Pair]:
    """The comparisons of the speed-quality run at equal settings (no shortlist, the same threads), each
    saying what differs: the student against its teacher on nmt (and the student with its shortlist
    against the teacher without, as `nmt distill` prints the student's command and `nmt translate`
    runs the teacher), nmt against CTranslate2 on the same student, and (the model differing too) nmt
    on the student against CTranslate2 on the teacher."""
    nmt, ct2 = {"engine": "torch"}, {"engine": "ctranslate2"}
    student, teacher = {"model": "student"}, {"model": "teacher"}
    out = [
        pair(t, "student / teacher", "the model", ({**student, **nmt}, {**teacher, **nmt}), setting)
        for setting in (("fp32", 4), ("int8", 4), ("int8", 1))
    ]
    listed = ({**student, **nmt, "shortlist": True}, {**teacher, **nmt})
    what, differs = "student with its shortlist / teacher", "the model, and the student's shortlist"
    out += [pair(t, what, differs, listed, setting) for setting in (("fp32", 4), ("int8", 4))]
    for precision, beam in (("fp32", 4), ("int8", 4), ("fp32", 1), ("int8", 1)):
        differs = "the engine" + (
            " (nmt stops by the exact rule, CTranslate2 by its own)" if beam > 1 else ""
        )
        sides = ({**student, **nmt}, {**student, **ct2})
        out.append(pair(t, "nmt / CTranslate2", differs, sides, (precision, beam)))
    sides = ({**student, **nmt}, {**teacher, **ct2})
    what = "nmt on the student / CTranslate2 on the teacher"
    return out + [pair(t, what, "the engine and the model", sides, ("int8", 1))]


def pick(pairs: list[Pair], what: str, precision: str, beam: int) -> Pair:
    return next(p for p in pairs if (p.what, p.precision, p.beam) == (what, precision, beam))


def speed_quality() -> str:
    """The distilled student's speed-quality table (benchmarks/speed_quality.py) and its comparisons at
    equal settings, computed from the run's measurements."""
    t = speed_table("speed-quality")
    rows = [
        [
            p.what,
            p.differs,
            p.same,
            f"{p.speed[0]:.1f} / {p.speed[1]:.1f}",
            f"{p.ratio:.2f}x",
            f"{p.bleu[0]:.2f} / {p.bleu[1]:.2f}",
        ]
        for p in speed_quality_pairs(t)
    ]
    pairs = table(["comparison", "what differs", "the same on both sides", "sent/s", "ratio", "BLEU"], rows)
    return (
        table(t["columns"], t["rows"])
        + "\nThe same run, each ratio two rows of the table above at equal settings but for what it "
        "says differs:\n\n" + pairs + "\n" + footnote(t, f"models: {t['models']}; {t['timing']}")
    )


def serve_attacks() -> str:
    """nmt serve against hostile requests, before and after (benchmarks/serve_attacks.py --json)."""
    t = speed_table("serve-attacks")
    before = f"before: the server of commit {t['before_commit']}; " if t.get("before_commit") else ""
    return table(t["columns"], t["rows"]) + "\n" + footnote(t, f"{before}model: {t['model']}")


def bulk_translate() -> str:
    """nmt translate against the sharded job, and a crash's cost (benchmarks/bulk_translate.py --json)."""
    t = speed_table("bulk-translate")
    out = table(t["columns"], t["rows"])
    if t.get("crash_rows"):
        out += "\nKilled (SIGKILL to the job's process group) once half its lines were finished, "
        out += "then rerun:\n\n"
        out += table(t["crash_columns"], t["crash_rows"])
    if t.get("batching_rows"):
        out += (
            "\nThe search's batches of the same input by shard size, counted from its piece lengths "
            "(not timed): decoder row-steps = each batch's sentences x its longest output:\n\n"
        )
        out += table(t["batching_columns"], t["batching_rows"])
    return out + "\n" + footnote(t, t["what"])


def import_marian() -> str:
    """`nmt import huggingface` of an OPUS-MT-size Marian model (benchmarks/import_marian.py --json)."""
    t = speed_table("import-marian")
    return table(t["columns"], t["rows"]) + "\n" + footnote(t, t["what"])


def glossary() -> str:
    """A glossary drawn from test2016's references, with and without it (benchmarks/glossary.py)."""
    t = load_json(RESULTS / "multi30k-decoding" / "glossary" / "glossary.json")
    return table(t["columns"], t["rows"]) + "\n" + footnote(t, f"{t['what']}; model: {t['model']}")


def quality_tables() -> list[dict]:
    """benchmarks/quality.py's JSONs: test2016 and the LibreOffice test set."""
    folder = RESULTS / "multi30k-decoding" / "quality"
    return [load_json(folder / name) for name in ("test2016.json", "libreoffice.json")]


def quality() -> str:
    """Confidence against sentence chrF (benchmarks/quality.py)."""
    tables = quality_tables()
    rows = [r for t in tables for r in t["rows"]]
    notes = "".join(footnote(t, t["what"]) + "\n" for t in tables)
    return table(tables[0]["columns"], rows) + "\n" + notes.rstrip("\n") + "\n"


def guards() -> str:
    """The guards on broken outputs (benchmarks/quality.py --guards)."""
    t = quality_tables()[0]
    clean = [
        ["the model's own outputs (flagged after the retry)", t["rows"][0][1], t["rows"][0][4]]
        + ["" for _ in t["guard_columns"][3:]]
    ]
    return table(t["guard_columns"], clean + t["guard_rows"]) + "\n" + footnote(t, t["what"])


def spans() -> str:
    """Protected spans on test2016 with a span in each sentence (benchmarks/spans.py)."""
    t = load_json(RESULTS / "multi30k-decoding" / "quality" / "spans.json")
    return table(t["columns"], t["rows"]) + "\n" + footnote(t, f"{t['what']}; model: {t['model']}")


def tag_placement(name: str = "tags-heldout") -> Callable[[], str]:
    """Where tags go with the reference forced as the output: the prior's width chosen on one half of
    LibreOffice help valid.tagged, reported on the other (benchmarks/real_text.py --parts 3o), from
    results/real-text/NAME.json (en-de: tags-heldout, en-zh: tags-heldout-en-zh)."""
    return lambda: tag_placement_table(load_json(RESULTS / "real-text" / f"{name}.json"))


def tag_placement_table(t: dict) -> str:
    chosen = f"Chosen: width {t['chosen']:g} (the best mean F1 of all tags on the choosing half)."
    return (
        "Choosing half:\n\n"
        + table(t["choose_columns"], t["choose_rows"])
        + f"\n{chosen} Reporting half:\n\n"
        + table(t["columns"], t["rows"])
        + "\n"
        + footnote(t, f"{t['what']}; {t['split']}; model: {t['model']}")
    )


# --- on a GPU: the tables benchmarks/gpu.py printed (results/speed/gpu/) ----------------------------

GPU_DIR = RESULTS / "speed" / "gpu"
GPU_BEFORE = "h200-163aff0.md"  # the whole table at 163aff0, torch's own attention kernels
GPU_TORCH_SDPA = "h200-bf16-torch-sdpa.md"  # bf16 rows, torch's own attention kernels (cuDNN's)
GPU_NMT_SDPA = "h200-bf16-nmt-sdpa.md"  # the same rows and more, nmt's (nmt.attention.CUDA_SDPA_BACKENDS)
GPU_COLUMNS = ["task", "model", "precision", "mode", "batch", "target tok/s", "sent/s", "step ms", "peak GiB"]
GPU_COLUMNS += ["TFLOP/s", "MFU", "MFU sheet", "BLEU"]


def gpu_run(name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """A table benchmarks/gpu.py printed into results/speed/gpu/NAME: its header lines before the
    table ("device", "attention on CUDA", ...) and its rows, each a dict by column."""
    path = GPU_DIR / name
    head: dict[str, str] = {}
    columns: list[str] | None = None
    rows: list[dict[str, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if columns is None:
                columns = cells
            elif set(line) - set("|-"):
                rows.append(dict(zip(columns, cells)))
        elif columns is None and ": " in line:
            key, value = line.split(": ", 1)
            head[key] = value
    if columns is None or not rows:
        raise FigureError(f"{path}: no table of benchmarks/gpu.py")
    return head, rows


def gpu_row(rows: list[dict[str, str]], **match: str) -> dict[str, str]:
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    if len(found) != 1:
        raise FigureError(f"{len(found)} rows of the GPU table match {match}")
    return found[0]


def recipe_hours(train_row: dict[str, str], updates: int) -> float:
    """Hours for ``updates`` updates at a GPU table's training row's time per update."""
    return updates * float(train_row["step ms"].replace(",", "")) / 1000 / 3600


def gpu_table() -> str:
    """docs/performance.md's GPU table: the bf16 rows under nmt's attention kernels, the float32
    (TF32) rows of the first run (their attention never took cuDNN's kernels, which are 16-bit only),
    and what nmt's kernels gain over torch's own choice, row by row."""
    head, rows = gpu_run(GPU_NMT_SDPA)
    _, before = gpu_run(GPU_BEFORE)
    _, torch_rows = gpu_run(GPU_TORCH_SDPA)
    tf32 = [r for r in before if r["precision"] == "tf32" and r["mode"] in ("", "eager") and r["TFLOP/s"]]
    body = [[r[c] for c in GPU_COLUMNS] for r in rows if r["task"] != "peak" or r["precision"] == "bf16"]
    body += [[f"{r[c]}¹" if c == "precision" else r[c] for c in GPU_COLUMNS] for r in tf32]
    gains = []
    for old in torch_rows:
        if old["task"] == "peak":
            continue
        same = ("task", "model", "precision", "mode") + (("batch",) if old["task"] == "decode" else ())
        new = gpu_row(rows, **{c: old[c] for c in same})  # a training row's batch differs run to run
        was, now = (float(r["target tok/s"].replace(",", "")) for r in (old, new))
        gains.append(
            [
                old["task"],
                old["model"],
                old["precision"],
                old["mode"],
                old["batch"],
                old["target tok/s"],
                new["target tok/s"],
                f"**{now / was:.1f}x**",
            ]
        )
    return (
        f"{head['device']}; attention on CUDA: nmt's kernels (flash, memory-efficient, math); `model` is "
        "the demo's model (`make demo`, 3 + 3 layers, d_model 256, 8,000 pieces) on test2016:\n\n"
        + table(GPU_COLUMNS, body)
        + f"\n¹ the first run ({GPU_BEFORE}): float32 with TF32 matrix products, whose attention never "
        "takes cuDNN's kernels (16-bit only).\n"
        + "\nnmt's attention kernels against torch's own choice (cuDNN's attention, which builds an "
        "execution plan for each new shape of a micro-batch or a shrinking search batch), "
        "target tok/s, the same machine and session:\n\n"
        + table(["task", "model", "precision", "mode", "batch", "torch's choice", "nmt's", "gain"], gains)
        + f"\nFrom: `results/speed/gpu/` ({GPU_NMT_SDPA} and {GPU_TORCH_SDPA}, two runs of one session, "
        "as `benchmarks/gpu.py` printed them). Commands in "
        "[its README](../results/speed/gpu/README.md).\n"
    )


def gpu_summary() -> str:
    """docs/gpu.md's measured training time of the paper's recipes on one H200 (bf16, eager)."""
    head, rows = gpu_run(GPU_NMT_SDPA)
    gpu = head["device"].split(" (")[0]
    parts = []
    for model, updates in (("base", 100_000), ("big", 300_000)):
        r = gpu_row(rows, task="train", model=model, precision="bf16", mode="eager")
        hours = recipe_hours(r, updates)
        parts.append(
            f"`{model}`: {r['target tok/s']} target tokens/s, an update of ~25,000 target tokens (one "
            f"micro-batch) every {r['step ms']} ms, **{updates:,} updates in {hours:.1f} hours** on one "
            f"{gpu}; {r['peak GiB']} GiB at its peak"
        )
    return (
        f"Measured on one {gpu} (`benchmarks/gpu.py`, bf16 autocast, eager, nmt's own training step on "
        f"random tokens with newstest2014's lengths; {head['device']}):\n\n"
        + "".join(f"- {p}\n" for p in parts)
        + "\nThe recipes' `max_tokens: 4096` (sized for 8 GPUs) splits an update into smaller "
        "micro-batches; these rates are for one micro-batch of 25,000 tokens, which `MAX_TOKENS=25000` "
        "gives a recipe on one such GPU (4,096 was not measured).\n"
    )


def gpu_row_glance() -> list[str]:
    """The README's glance row of the H200 run: `base` training and the demo model's beam search."""
    head, rows = gpu_run(GPU_NMT_SDPA)
    train = gpu_row(rows, task="train", model="base", precision="bf16", mode="eager")
    search = gpu_row(rows, task="decode", model="model", precision="bf16", mode="beam 4", batch="512 sent")
    hours = recipe_hours(train, 100_000)
    return [
        "training and decoding on one GPU",
        "`python benchmarks/gpu.py`",
        f"`base`: **{train['target tok/s']}** target tok/s (100,000 updates of ~25,000 target tokens: "
        f"{hours:.1f} hours); the demo model at beam 4: {search['sent/s']} sent/s, test2016 {search['BLEU']}",
        f"{run_of('speed/gpu').label('beam 4, alpha 0.6')}, {head['device'].split(', ')[-1]}",
        "[results/speed/gpu/](results/speed/gpu/README.md)",
    ]


# --- the shortlist's scope: each sentence over its own list against its batch's union ------------

SCOPE_RUNS = (  # (set, the run at the scope "sentence", the run at the scope "batch", its student's name)
    ("valid", "distill/valid-sentence-scope", "distill/valid", "student-ff256"),
    ("test2016", "distill/test2016-sentence-scope", "speed-quality", "student"),
)


SCOPE_AVX2_RUN = "distill/valid-sentence-scope-avx2"  # valid at the scope "sentence" on the AVX2 path


def listed_over_teacher(t: dict, student: str, precision: str) -> tuple[float, float, float]:
    """A speed-quality run's student (in ``precision``) with its shortlist against the teacher without
    (fp32), nmt at beam 4: (speed ratio, the student's BLEU, the teacher's BLEU)."""
    s = {"model": student, "engine": "nmt", "precision": precision, "shortlist": "yes", "beam": "4"}
    teacher = {"model": "teacher", "engine": "nmt", "precision": "fp32", "shortlist": "no", "beam": "4"}
    speed = float(cell(t, "sent/s", **s)) / float(cell(t, "sent/s", **teacher))
    return speed, float(cell(t, "BLEU", **s)), float(cell(t, "BLEU", **teacher))


def shortlist_scope() -> str:
    """docs/performance.md: the chosen student with its shortlist against its teacher without (nmt,
    beam 4, 2 threads), each sentence over its own list (nmt's default) and its batch's union (the
    runs before the default changed), on valid and test2016."""

    def ratio(t: dict, student: str, precision: str) -> tuple[str, str]:
        speed, bleu, teacher_bleu = listed_over_teacher(t, student, precision)
        return f"{speed:.2f}x", f"{bleu - teacher_bleu:+.2f}"

    rows, notes = [], []
    for split, sentence_run, batch_run, old_name in SCOPE_RUNS:
        new, old = speed_table(sentence_run), speed_table(batch_run)
        for scope, t, name in (("sentence", new, "student"), ("batch", old, old_name)):
            fp32, int8 = ratio(t, name, "fp32"), ratio(t, name, "int8")
            rows.append([split, scope, fp32[0], fp32[1], int8[0], int8[1], f"{t['commit']}, {t['date']}"])
        notes.append(f"`results/speed/{sentence_run}.json` and `results/speed/{batch_run}.json`")
    forced = speed_table(SCOPE_AVX2_RUN)  # the same run with every library held to its AVX2 kernels
    fp32, int8 = ratio(forced, "student", "fp32"), ratio(forced, "student", "int8")
    path = ", ".join(f"{k}={v}" for k, v in forced["cpu_path"]["forced"].items())
    rows.append(["valid", f"sentence ({path})", *fp32, *int8, f"{forced['commit']}, {forced['date']}"])
    notes.append(f"`results/speed/{SCOPE_AVX2_RUN}.json`")
    return (
        table(
            [
                "set",
                "scope",
                "x teacher (fp32)",
                "BLEU",
                "x teacher (the student in int8)",
                "BLEU",
                "commit, date",
            ],
            rows,
        )
        + f"\nThe student with its shortlist against the teacher without it, both searched by nmt at beam 4 "
        f"on 2 threads, the teacher in fp32 ({cpu_kind(speed_table(SCOPE_RUNS[0][1])['cpu_detail'])}). "
        f"From: {'; '.join(notes)} (`benchmarks/speed_quality.py --json`).\n"
    )


def serve_shortlist() -> str:
    """docs/serving.md: `nmt serve` with and without a shortlist (each sentence over its own list),
    the same model, sentences and threads, one run each, one after the other."""
    plain, listed = speed_table("serve-load-2threads"), speed_table("serve-load-shortlist")
    clients = [r[plain["columns"].index("clients")] for r in plain["rows"] if r[0] == "dynamic batching"]

    def rates(t: dict, server: str) -> list[str]:
        return [cell(t, "sent/s", server=server, clients=c) for c in clients] + [t["baselines"]["rows"][0][1]]

    rows = [
        ["no shortlist, dynamic batching", *rates(plain, "dynamic batching")],
        ["shortlist, dynamic batching", *rates(listed, "dynamic batching")],
        ["shortlist, one request at a time (`--no-batching`)", *rates(listed, "batching off")],
    ]
    head = ["server", *(f"{c} client{'s' if c != '1' else ''}" for c in clients), "offline (sent/s)"]
    return (
        table(head, rows)
        + "\n"
        + footnote(listed, f"{listed['precision']}; model: {listed['model']}; {listed['what']}")
        + f"Without the shortlist: {shown(plain['command'])}, commit {plain['commit']}.\n"
    )
