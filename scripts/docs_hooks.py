"""MkDocs hook: publish nmt's source files with the site, so that the docs link to the code.

`docs/model.md` maps each section and equation of the paper to the function that implements it; its
links point at `../nmt/...py`, the file in the repository (so they work on GitHub and in a clone).
This hook adds every `nmt/**/*.py` file to the site under `src/` (copied as plain text, not
rendered) and points those links there, so they resolve in the site too, are checked by `mkdocs
build --strict` like any other link, and open in the browser.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent


def on_files(files: Files, config) -> Files:
    for path in sorted((ROOT / "nmt").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        files.append(File.generated(config, f"src/{rel}", abs_src_path=str(path)))
    return files


SOURCE_LINK = re.compile(r"\]\(\.\./nmt/([^)#\s]+\.py)")  # ](../nmt/x.py) from a page at the top of docs/


def on_page_markdown(markdown: str, page, config, files) -> str:
    """A link to ``../nmt/X.py`` (the repository's file) becomes ``src/nmt/X.py`` (the site's copy)."""
    if "/" in page.file.src_uri:  # a page in a subfolder of docs/ would need another prefix
        return markdown
    return SOURCE_LINK.sub(r"](src/nmt/\1", markdown)
