"""Write docs/cli.md, the command-line reference, from nmt's own argparse parsers.

    python scripts/cli_reference.py            # rewrite docs/cli.md
    python scripts/cli_reference.py --check    # exit 1 if docs/cli.md differs (tests run this)

The page is the `--help` of `nmt` and of every subcommand, formatted at a fixed width, so it
never drifts from the code: tests/test_docs.py fails when the file differs from what this prints.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "cli.md"
WIDTH = 100


class StableHelpFormatter(argparse.HelpFormatter):
    """argparse's help with an option that takes a value written one way on Python 3.10 to 3.13+:
    ``-i INPUT, --input INPUT`` (the value after each of its names). Python 3.13 writes
    ``-i, --input INPUT``, which also moves help text between lines (the invocation is shorter than
    the help column), so the page is made with this formatter rather than fixed up afterwards."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:  # positionals and flags: one form everywhere
            return super()._format_action_invocation(action)
        value = self._format_args(action, self._get_default_metavar_for_optional(action))
        return ", ".join(f"{option} {value}" for option in action.option_strings)


def _help(parser: argparse.ArgumentParser) -> str:
    os.environ["COLUMNS"] = str(WIDTH)  # argparse reads the width from COLUMNS at format time
    parser.formatter_class = StableHelpFormatter
    return parser.format_help().rstrip() + "\n"


def render() -> str:
    sys.path.insert(0, str(ROOT))
    from nmt.cli import build_parser

    parser = build_parser()
    parser.prog = "nmt"
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [
        "# Command-line reference",
        "",
        "Generated from nmt's argparse parsers by `python scripts/cli_reference.py` "
        "(a test fails when this page differs from what the script prints). "
        "Every command also accepts `--debug` (show the traceback of an unexpected error).",
        "",
        "## nmt",
        "",
        "```text",
        _help(parser).rstrip(),
        "```",
        "",
    ]
    for name, p in sub.choices.items():
        title = "nmt prepare ptb" if name == "prepare-ptb" else f"nmt {name}"
        lines += [f"## {title}", "", "```text", _help(p).rstrip(), "```", ""]
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        for action, q in nested[0].choices.items() if nested else ():  # `nmt translate-shards run`
            lines += [f"### {title} {action}", "", "```text", _help(q).rstrip(), "```", ""]
    lines += _config_fields()
    return "\n".join(lines)


FIELD = re.compile(r"^    (\w+): ([^=]+?) = (.+?)(?:\s+#\s*(.*))?$")


def _config_fields() -> list[str]:
    """The fields of ModelConfig and TrainConfig (`--model.FIELD=VALUE`, `--train.FIELD=VALUE`, or
    the `model:` / `train:` sections of a --config YAML), with their defaults and inline comments,
    read from nmt/config.py."""
    lines = [
        "## Configuration fields",
        "",
        "Set in the `model:` / `train:` sections of a `--config` YAML file, or on the command line "
        "as `--model.FIELD=VALUE` / `--train.FIELD=VALUE` (type-checked). Defaults are the paper's "
        "`base` model and training; the presets `base`, `big`, `small`, `tiny` change some of them.",
        "",
    ]
    section = None
    for line in (ROOT / "nmt" / "config.py").read_text(encoding="utf-8").splitlines():
        if line.startswith("class "):
            name = line[len("class ") :].split("(")[0].split(":")[0]
            section = {"ModelConfig": "model", "TrainConfig": "train"}.get(name)
            if section:
                lines += [
                    f"### `{section}:` ({name})",
                    "",
                    "| field | type | default | note |",
                    "|---|---|---|---|",
                ]
            continue
        m = FIELD.match(line) if section else None
        if m:
            field, kind, default, note = m.groups()
            note = (note or "").replace("|", "\\|")
            lines.append(f"| `{field}` | `{kind.strip()}` | `{default.strip()}` | {note} |")
        elif section and line and not line.startswith(" ") and lines[-1] != "":
            lines.append("")
            section = None
    return lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with docs/cli.md instead of writing it")
    args = ap.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run `python scripts/cli_reference.py`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
