"""Text as lines: reading a corpus file (plain or gzip UTF-8, one sentence per line, files aligned
by line) and cleaning each sentence (`clean_line`, the same at training and translation time;
`clean_split` also counts what it changed, the "cleaning" report of `nmt prepare`)."""

from __future__ import annotations

import gzip
import itertools
import re
import sys
import unicodedata
import zlib
from collections.abc import Iterator
from pathlib import Path

from .download import DataError


# ------------------------------------------------------------------------------- reading text
def read_lines(path: str | Path, *, errors: str = "strict") -> Iterator[str]:
    """Yield the lines of a UTF-8 text file (plain or gzip, detected by magic bytes; "-" = stdin).

    Lines come without the trailing newline ("\\n" or "\\r\\n") and with a leading BOM removed;
    only "\\n" separates lines. Invalid UTF-8 raises DataError naming the file and line, or
    becomes U+FFFD with ``errors="replace"``.
    """
    if str(path) == "-":
        yield from _decode_lines(sys.stdin.buffer, "<stdin>", errors)
        return
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    except OSError as e:  # missing or unreadable file
        raise DataError(f"cannot read {path}: {e}") from e
    n = 0  # lines read so far
    try:
        with gzip.open(path, "rb") if gz else open(path, "rb") as f:
            for n, line in enumerate(_decode_lines(f, str(path), errors), start=1):
                yield line
    except (OSError, EOFError, zlib.error) as e:  # truncated or corrupt gzip (zlib.error: bad deflate data)
        what = "corrupt or truncated gzip" if gz else "read error"
        raise DataError(f"{path}: line {n + 1}: {what} ({e})") from e


def _decode_lines(f, name: str, errors: str = "strict") -> Iterator[str]:
    for n, raw in enumerate(f, start=1):
        try:
            line = raw.decode("utf-8", errors=errors)
        except UnicodeDecodeError as e:
            raise DataError(
                f"{name}: line {n}: invalid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
            ) from None
        if n == 1 and line.startswith("\ufeff"):
            line = line[1:]
        yield line.rstrip("\n").removesuffix("\r")


def read_pairs(src_path: str | Path, tgt_path: str | Path) -> Iterator[tuple[str, str]]:
    """Yield aligned (src, tgt) lines; DataError naming both files and counts if they differ."""
    src_it, tgt_it = read_lines(src_path), read_lines(tgt_path)
    n = 0
    for pair in itertools.zip_longest(src_it, tgt_it):
        if pair[0] is None or pair[1] is None:
            rest = 1 + sum(1 for _ in (src_it if pair[1] is None else tgt_it))
            n_src, n_tgt = (n + rest, n) if pair[1] is None else (n, n + rest)
            raise DataError(
                f"line count mismatch: {src_path} has {n_src} lines but {tgt_path} has {n_tgt} lines"
            )
        n += 1
        yield pair


# ------------------------------------------------------------------------------- cleaning text
# Control characters inside a line: C0 (tab, CR, NUL, ...), DEL, C1 (incl. NEL U+0085) and the
# Unicode line / paragraph separators U+2028/2029 become one space each (as Moses'
# remove-non-printing-char and HF's BertNormalizer clean_text do); U+FEFF (byte-order mark, or
# zero-width no-break space) is removed. Other format characters (ZWJ, bidi marks) are kept.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


def _control_to_space(match: re.Match) -> str:
    return "" if match.group() == "\ufeff" else " "


def clean_line(text: str) -> str:
    """The cleaning applied to every sentence (also at translation time): strip, control
    characters inside the line to one space each (U+FEFF removed), strip, then NFC."""
    return unicodedata.normalize("NFC", _CONTROL.sub(_control_to_space, text.strip()).strip())


def clean_split(src_path: Path, tgt_path: Path, files: tuple[Path, Path], *, drop_empty: bool) -> dict:
    """Write cleaned, line-aligned text of one split to `files`; return the cleaning counts."""
    stats = {
        "read": 0,
        "kept": 0,
        "stripped": 0,
        "control_chars": 0,
        "nfc_changed": 0,
        "dropped": {"empty": 0},
    }
    if not drop_empty:
        stats["empty_kept"] = 0
    with (
        open(files[0], "w", encoding="utf-8", newline="\n") as fs,
        open(files[1], "w", encoding="utf-8", newline="\n") as ft,
    ):
        for src, tgt in read_pairs(src_path, tgt_path):
            stats["read"] += 1
            pair = []
            for text in (src, tgt):
                stripped = text.strip()
                spaced = _CONTROL.sub(_control_to_space, stripped).strip()  # as clean_line
                clean = unicodedata.normalize("NFC", spaced)
                stats["stripped"] += stripped != text
                stats["control_chars"] += spaced != stripped
                stripped = spaced
                stats["nfc_changed"] += clean != stripped
                pair.append(clean)
            if not (pair[0] and pair[1]):
                if drop_empty:
                    stats["dropped"]["empty"] += 1
                    continue
                stats["empty_kept"] += 1
            fs.write(pair[0] + "\n")
            ft.write(pair[1] + "\n")
            stats["kept"] += 1
    return stats
