"""MkDocs hook: publish nmt's source files with the site, so that the docs link to the code.

`docs/model.md` maps each section and equation of the paper to the function that implements it; its
links point at `src/nmt/...py`. This hook adds every `nmt/**/*.py` file to the site under `src/`
(copied as plain text, not rendered), so those links resolve, are checked by `mkdocs build
--strict` like any other link, and open in the browser.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent


def on_files(files: Files, config) -> Files:
    for path in sorted((ROOT / "nmt").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        files.append(File.generated(config, f"src/{rel}", abs_src_path=str(path)))
    return files
