"""The documentation stays true to the code: the CLI reference is generated, the README is a front
door whose links resolve, and every results folder the docs cite exists with its README."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_cli_reference_matches_the_argparse_parsers():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_cli_reference_check_fails_when_the_page_differs(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import cli_reference
    finally:
        sys.path.pop(0)
    stale = tmp_path / "cli.md"
    stale.write_text(cli_reference.render().replace("--beam", "--bean"), encoding="utf-8")
    monkeypatch.setattr(cli_reference, "OUT", stale)
    monkeypatch.setattr(sys, "argv", ["cli_reference.py", "--check"])
    assert cli_reference.main() == 1


# argparse 3.10-3.12 on toy_parser at 70 columns; 3.13 prints "-i, --input INPUT" and moves the help
TOY_HELP = """usage: toy [-h] [-i INPUT] [--beam N] [-v] [--pair A B] SRC

positional arguments:
  SRC

options:
  -h, --help            show this help message and exit
  -i INPUT, --input INPUT
                        a file
  --beam N              beam size
  -v, --verbose         say more
  --pair A B, -p A B    two things
"""


def toy_parser(formatter_class) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="toy", formatter_class=formatter_class)
    p.add_argument("src", metavar="SRC")
    p.add_argument("-i", "--input", help="a file")
    p.add_argument("--beam", metavar="N", help="beam size")
    p.add_argument("-v", "--verbose", action="store_true", help="say more")
    p.add_argument("--pair", "-p", nargs=2, metavar=("A", "B"), help="two things")
    return p


def test_cli_reference_writes_an_option_and_its_value_one_way_on_every_python(monkeypatch):
    """The reference's formatter writes 3.10-3.12's "-i INPUT, --input INPUT" on any Python (3.13's
    own formatter writes "-i, --input INPUT", which also puts the help on the same line), so the
    page made on one version matches the check run on another."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import cli_reference
    finally:
        sys.path.pop(0)
    monkeypatch.setenv("COLUMNS", "70")
    assert toy_parser(cli_reference.StableHelpFormatter).format_help() == TOY_HELP
    plain = toy_parser(argparse.HelpFormatter).format_help()
    assert plain == TOY_HELP or re.search(
        r"\n  -i, --input INPUT +a file\n", plain
    )  # 3.13+: what it replaces


def test_presets_tables_match_nmt_config():
    """docs/gpu.md's presets tables are what scripts/presets_table.py writes from nmt/config.py."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "presets_table.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_presets_tables_check_fails_when_a_default_differs(tmp_path, monkeypatch):
    """small's lr_scale 2.0 written as 1 on the page: the check fails."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import presets_table
    finally:
        sys.path.pop(0)
    page = presets_table.render(presets_table.OUT.read_text(encoding="utf-8"))
    row = next(line for line in page.splitlines() if line.startswith("| `small` | 2,048 | 4,096 | 2 |"))
    stale = tmp_path / "gpu.md"
    stale.write_text(page.replace(row, row.replace("| 4,096 | 2 |", "| 4,096 | 1 |")), encoding="utf-8")
    monkeypatch.setattr(presets_table, "OUT", stale)
    monkeypatch.setattr(sys, "argv", ["presets_table.py", "--check"])
    assert presets_table.main() == 1


def test_readme_is_a_front_door_of_at_most_200_lines_and_2500_words():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert len(text.split()) <= 2500
    assert not re.search(r"\bissue \d+", text, re.IGNORECASE), "the README names no issue numbers"


def test_readme_links_point_at_files_that_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in LINK.findall(text) if "://" not in t]
    assert targets, "the README links to the docs and results"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing


def test_every_results_folder_cited_by_the_docs_exists_with_a_readme():
    cited = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        cited |= set(re.findall(r"results/[\w.-]+(?:/[\w.-]+)*/", page.read_text(encoding="utf-8")))
    assert cited
    for folder in sorted(cited):
        assert (ROOT / folder / "README.md").is_file(), f"{folder} is cited but has no README.md"


def test_results_stay_small_and_indexed():
    entries = [p for p in (ROOT / "results").iterdir()]
    assert len(entries) <= 13  # one folder per task and README.md; a new run of a task goes into its folder
    index = (ROOT / "results" / "README.md").read_text(encoding="utf-8")
    for p in entries:
        if p.is_dir():
            assert (p / "README.md").is_file(), f"{p.name} has no README.md"
            assert f"{p.name}/" in index, f"results/README.md does not list {p.name}/"
