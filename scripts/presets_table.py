"""Write the presets tables of docs/gpu.md from nmt/config.py (`PRESETS`, `train_preset`).

    python scripts/presets_table.py            # rewrite the tables in docs/gpu.md
    python scripts/presets_table.py --check    # exit 1 if the page differs (tests run this)

Each table has a column for every field on which some preset differs from another, and says which
fields all presets share; so a preset or a default changed in the code changes the page, and
tests/test_docs.py fails until this script has been run.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from nmt.config import PRESETS, preset, train_preset  # noqa: E402
from nmt.model import Transformer  # noqa: E402
from nmt.parameter_counts import parameter_counts  # noqa: E402

OUT = ROOT / "docs" / "gpu.md"
BEGIN = "<!-- presets: written by scripts/presets_table.py from nmt/config.py; do not edit by hand -->"
END = "<!-- end of the presets tables -->"


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "none"
    if isinstance(v, float) and v.is_integer():
        return f"{v:g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _table(rows: dict[str, object], *, extra: dict[str, dict[str, str]] | None = None) -> list[str]:
    """A markdown table, a row per preset, a column per field that differs between presets (and the
    ``extra`` columns), then the fields every preset shares."""
    fields = [f.name for f in dataclasses.fields(next(iter(rows.values())))]
    values = {name: dataclasses.asdict(cfg) for name, cfg in rows.items()}
    differ = [f for f in fields if len({repr(v[f]) for v in values.values()}) > 1]
    same = [f for f in fields if f not in differ]
    extra = extra or {}
    header = ["preset", *differ, *extra]
    lines = ["| " + " | ".join(f"`{h}`" if h in differ else h for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    for name in rows:
        cells = [
            f"`{name}`",
            *(_value(values[name][f]) for f in differ),
            *(col[name] for col in extra.values()),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    first = next(iter(values.values()))
    lines += ["", "The same in every preset: " + ", ".join(f"`{f}` {_value(first[f])}" for f in same) + "."]
    return lines


def render_tables() -> str:
    models = {name: preset(name) for name in PRESETS}
    params = {}
    for name, cfg in models.items():
        with torch.device("meta"):  # shapes only: no memory, no time
            params[name] = f"{parameter_counts(Transformer(cfg))['total'] / 1e6:.1f}M"
    lines = [BEGIN, "", "Model (`--model.*`; parameters at the preset's own vocabulary size):", ""]
    lines += _table(models, extra={"parameters": params})
    lines += ["", "Training (`--train.*`):", ""]
    lines += _table({name: train_preset(name) for name in PRESETS})
    lines += ["", END]
    return "\n".join(lines)


def render(page: str) -> str:
    """``page`` with its tables (between BEGIN and END) rewritten."""
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{OUT}: no {BEGIN!r} ... {END!r} block")
    head, rest = page.split(BEGIN, 1)
    return head + render_tables() + rest.split(END, 1)[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with docs/gpu.md instead of writing it")
    args = ap.parse_args()
    page = OUT.read_text(encoding="utf-8")
    text = render(page)
    if args.check:
        if text != page:
            print(
                f"{OUT}: the presets tables are out of date: run `python scripts/presets_table.py`",
                file=sys.stderr,
            )
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
