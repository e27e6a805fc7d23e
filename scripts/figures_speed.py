"""The speed figures: the benchmark tables kept in results/speed/*.json and the training rate of real runs.

Each table is rendered as the benchmark printed it, followed by a line naming the CPU, torch, the
commit, the date, the command and where the table was first committed (`python scripts/figures.py`
writes them into docs/performance.md, docs/results.md and results/speed/README.md).
"""

from __future__ import annotations

from collections.abc import Callable

from result_files import RESULTS, cell, load_json, median_train_rate, run_of, shown, speed_table, table


def footnote(t: dict, extra: str = "") -> str:
    cpu = t.get("cpu_detail", t.get("cpu", ""))
    parts = [
        f"CPU: 2 cores, {cpu}",
        f"torch {t['torch']}, {t['threads']} thread{'s' if t['threads'] > 1 else ''}" if "torch" in t else "",
        f"commit {t['commit']}, {t['date']}" if "commit" in t else "",
        extra,
    ]
    text = "; ".join(p for p in parts if p)
    return f"{text}. Command: {shown(t['command'])}. From: {t['source']}.\n"


def speed_summary() -> str:
    ct2 = speed_table("translate-ct2-recipe")
    exact = cell(ct2, "vs CT2", decoder="nmt", precision="fp32", beam="4", stopping="exact")
    fast = next(r for r in ct2["rounds"]["rows"] if r["precision"] == "fp32" and r["beam"] == 4)
    greedy = cell(ct2, "vs CT2", decoder="nmt", precision="fp32", beam="1")
    base = speed_table("translate-ct2-base")
    base4 = cell(base, "vs CT2", decoder="nmt", precision="fp32", beam="4")
    real, n = median_train_rate(RESULTS / "multi30k-30min/zen5/metrics.jsonl.gz")
    synth = next(r for r in speed_table("train-speed")["rows"] if r["cpu"] == "Zen 5")
    rows = [
        [
            "decoding, recipe model, float32 beam 4 against CTranslate2 4.8.5",
            f"{ct2['cpu']}, fp32, {ct2['commit']}, {ct2['date']} (not rerun on today's code)",
            f"**{exact}x** under nmt's default exact stopping; "
            f"{fast['median']}x with `--stopping fast` (median of 8 "
            f"rounds); greedy {greedy}x; `base`, fixed length: {base4}x",
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
        + f"\nFrom: {synth['source']}.\n"
    )


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
    cols = [
        "CPU",
        "one process, 2 threads",
        "two processes, 1 thread each (sum)",
        "gain",
        "command",
        "commit, date",
    ]
    return table(cols, rows) + f"\n{t['what']}. From: {t['source']}.\n"


def ct2_recipe() -> str:
    t = speed_table("translate-ct2-recipe")
    exact = cell(t, "vs CT2", decoder="nmt", precision="fp32", beam="4", stopping="exact")
    exact8 = cell(t, "vs CT2", decoder="nmt", precision="int8", beam="4", stopping="exact")
    rounds = "; ".join(
        f"{r['precision']} {'beam 4 fast' if r['beam'] == 4 else 'greedy'} "
        f"{r['best']}x best / {r['median']}x median"
        for r in t["rounds"]["rows"]
    )
    return (
        "nmt's default (the exact stopping rule), float32 "
        f"beam 4: **{exact}x** CTranslate2 (int8 {exact8}x). "
        f"With `--stopping fast`, over 8 rounds ({shown(t['rounds']['command'])}): {rounds}.\n\n"
        + table(t["columns"], t["rows"])
        + "\n"
        + footnote(t, "model: " + t["model"] + "; " + t["timing"] + "; not rerun on today's code")
    )


def ct2_today() -> str:
    """The same comparison rerun on today's code (the make demo recipe's model)."""
    t = speed_table("translate-ct2-demo-zen4")
    exact = cell(t, "vs CT2", decoder="nmt", precision="fp32", beam="4", stopping="exact")
    fast = cell(t, "vs CT2", decoder="nmt", precision="fp32", beam="4", stopping="fast")
    greedy = cell(t, "vs CT2", decoder="nmt", precision="fp32", beam="1")
    return (
        f"nmt's default (the exact stopping rule), float32 beam 4: **{exact}x** CTranslate2; with "
        f"`--stopping fast` {fast}x; greedy {greedy}x.\n\n"
        + table(t["columns"], t["rows"])
        + "\n"
        + footnote(t, "model: " + t["model"] + "; " + t["timing"])
    )


def ct2_base() -> str:
    t = speed_table("translate-ct2-base")
    return table(t["columns"], t["rows"]) + "\n" + footnote(t, t["timing"] + "; not rerun on today's code")


def shortlist(name: str) -> Callable[[], str]:
    def render() -> str:
        t = speed_table(name)
        return table(t["columns"], t["rows"]) + "\n" + footnote(t, t["what"] + "; " + t["timing"])

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
        "nmt with its shortlist over nmt without, beam 4, on the 1,093-update demo checkpoint: "
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


def speed_quality() -> str:
    """The distilled students' speed-quality table (benchmarks/speed_quality.py), with its goals."""
    t = speed_table("speed-quality")
    goals = "".join(f"- {g}\n" for g in t["goals"])
    return (
        table(t["columns"], t["rows"])
        + "\n"
        + (goals + "\n" if goals else "")
        + footnote(t, f"models: {t['models']}; {t['timing']}")
    )


def serve_attacks() -> str:
    """nmt serve against hostile requests, before and after (benchmarks/serve_attacks.py --json)."""
    t = speed_table("serve-attacks")
    before = f"before: the server of commit {t['before_commit']}; " if t.get("before_commit") else ""
    return table(t["columns"], t["rows"]) + "\n" + footnote(t, f"{before}model: {t['model']}")


def glossary() -> str:
    """A glossary drawn from test2016's references, with and without it (benchmarks/glossary.py)."""
    t = load_json(RESULTS / "multi30k-decoding" / "glossary" / "glossary.json")
    return table(t["columns"], t["rows"]) + "\n" + footnote(t, f"{t['what']}; model: {t['model']}")
