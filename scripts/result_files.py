"""Read the figures out of the committed result files under results/.

Each reader takes one kind of file as the run wrote it (sacreBLEU lines of `nmt score` or of a
recipe's log, `train.log`, `metrics.jsonl.gz`, `nmt score --format json`, `nmt variations`'
`result.json`, the benchmark tables kept as JSON in results/speed/) and raises `FigureError`
naming the file and what is missing, so that a figure is never made up when its file changes.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"

sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import public_command  # noqa: E402  (the rule the benchmarks record their commands by)

sys.path.remove(str(ROOT / "benchmarks"))

BLEU_LINE = re.compile(r"^BLEU = ([\d.]+) .*\(BP = ([\d.]+) ratio = ([\d.]+)")
CHRF_LINE = re.compile(r"^chrF2 = ([\d.]+)")
SEARCH = re.compile(r"beam (\d+), alpha ([\d.]+)")
STOPPED = re.compile(r"stopped \((\w+)\) at (?:step|update) (\d+), epoch (\d+), ([\d.]+) min")
F1_LINE = re.compile(r"P ([\d.]+) R ([\d.]+) F1 ([\d.]+)")


class FigureError(Exception):
    """A result file lacks the line or field a published figure is read from."""


@dataclass(frozen=True)
class Run:
    """Where a figure was measured: the CPU, the precision `auto` chose, the code's commit, the date."""

    cpu: str
    precision: str
    commit: str
    date: str

    def label(self, search: str = "") -> str:
        parts = [self.cpu, self.precision, search, self.commit, self.date]
        return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class Score:
    """One sacreBLEU result: BLEU, brevity penalty and chrF2, with the search that produced it."""

    bleu: float
    bp: float
    chrf: float
    search: str  # "beam 4, alpha 0.6, exact" when the log names it, else ""
    source: str  # file:line of the BLEU line


def rel(path: Path) -> str:
    """`path` relative to the repository when it is inside it (errors name the file as a user sees it)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run_of(folder: str, key: str = ".") -> Run:
    """The run behind `results/FOLDER[/KEY]` from the folder's runs.json."""
    path = RESULTS / folder / "runs.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))[key]
    except KeyError:
        raise FigureError(f"{rel(path)}: no entry {key!r}") from None
    return Run(cpu=entry["cpu"], precision=entry["precision"], commit=entry["commit"], date=entry["date"])


def score(path: Path, *, after: str = "") -> Score:
    """The first sacreBLEU result in `path` after the line starting with `after` (the whole file if "").

    The search (beam, alpha) is read from the nearest `== ...` header above the BLEU line; nmt's
    stopping rule was the exact one in every committed run (the default; `fast` is never used there).
    """
    lines = path.read_text(encoding="utf-8").splitlines()
    start = 0
    if after:
        start = next((i for i, line in enumerate(lines) if line.startswith(after)), -1)
        if start < 0:
            raise FigureError(f"{rel(path)}: no line starting with {after!r}")
    for i in range(start, len(lines)):
        m = BLEU_LINE.match(lines[i])
        if not m:
            continue
        chrf = next((CHRF_LINE.match(x) for x in lines[i : i + 4] if CHRF_LINE.match(x)), None)
        if chrf is None:
            raise FigureError(f"{rel(path)}:{i + 1}: no chrF2 line after the BLEU line")
        header = next((lines[j] for j in range(i, start - 1, -1) if lines[j].startswith("==")), "")
        s = SEARCH.search(header)
        search = f"beam {s.group(1)}, alpha {s.group(2)}, exact" if s else ""
        return Score(
            bleu=float(m.group(1)),
            bp=float(m.group(2)),
            chrf=float(chrf.group(1)),
            search=search,
            source=f"{rel(path)}:{i + 1}",
        )
    raise FigureError(f"{rel(path)}: no 'BLEU = ' line" + (f" after {after!r}" if after else ""))


def stopped(path: Path) -> tuple[int, float]:
    """(updates, minutes) of the last `stopped (...) at update N, epoch E, M min` line of a log
    (`at step N` in logs written before the count was called an update)."""
    found = [STOPPED.search(line) for line in path.read_text(encoding="utf-8").splitlines()]
    found = [m for m in found if m]
    if not found:
        raise FigureError(f"{rel(path)}: no 'stopped (...) at update N' line")
    return int(found[-1].group(2)), float(found[-1].group(4))


def median_train_rate(path: Path) -> tuple[float, int]:
    """Median target tok/s over a run's logged training windows (metrics.jsonl.gz), and their number."""
    rates = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") == "train" and "tgt_tokens_per_s" in row:
                rates.append(row["tgt_tokens_per_s"])
    if not rates:
        raise FigureError(f"{rel(path)}: no training line with tgt_tokens_per_s")
    return statistics.median(rates), len(rates)


def f1(path: Path) -> float:
    m = F1_LINE.search(path.read_text(encoding="utf-8"))
    if not m:
        raise FigureError(f"{rel(path)}: no 'P .. R .. F1 ..' line")
    return float(m.group(3))


def load_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise FigureError(f"{rel(path)}: {e}") from None


def speed_table(name: str) -> dict:
    """A benchmark's table as it printed it, kept with its command, CPU, commit and date."""
    table = load_json(RESULTS / "speed" / f"{name}.json")
    missing = [key for key in ("what", "rows", "source") if key not in table]
    if missing:
        raise FigureError(f"results/speed/{name}.json: no {missing[0]!r}")
    return table


def cell(table: dict, column: str, **match: str) -> str:
    """The `column` cell of the one row of a speed table whose cells equal `match`."""
    cols = table["columns"]
    rows = [
        r for r in table["rows"] if all(r[cols.index(k.replace("_", " "))] == v for k, v in match.items())
    ]
    if len(rows) != 1:
        raise FigureError(f"speed table {table.get('what', '')[:40]!r}: {len(rows)} rows match {match}")
    return rows[0][cols.index(column)]


def table(columns: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def shown(command: str) -> str:
    """A recorded command as a page prints it: in backticks, with only paths a reader has (the corpora
    as `$NMT_DATA_DIR/...`, no file of the machine that ran it: `machine.public_command`)."""
    return f"`{public_command(command)}`"


def cpu_kind(detail: str) -> str:
    """'Zen 4' of 'AMD EPYC Zen 4 (cpu family 25 ...)', 'Xeon (avx512_bf16, no AMX)' of 'Intel(R) Xeon(R)
    Processor (... flags avx2, avx512_bf16, ...)': the CPU as the tables name it."""
    name = detail.split(" (")[0].removeprefix("AMD EPYC ")
    if "Xeon" not in name:
        return name
    flags = [f for f in ("amx", "avx512_bf16") if f in detail]
    return (
        "Xeon ("
        + (", ".join(flags) if flags else "fp32 only")
        + (", no AMX" if "amx" not in flags else "")
        + ")"
    )
