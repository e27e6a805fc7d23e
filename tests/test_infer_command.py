"""`nmt translate` (nmt/infer/command.py): one output line per input line whatever the line, invalid UTF-8
named by line, and the CLI's output the Translator API's (ensembles, int8)."""

import dataclasses
import io
import sys

import pytest
import torch
from translate_fixtures import cli

from nmt.checkpoint import save
from nmt.config import tiny
from nmt.infer.translate import (
    TranslateError,
    Translator,
)
from nmt.model import Transformer

FAST = ("--beam", "2", "--max-len-a", "0", "--max-len-b", "4", "--quiet")


def test_line_count_kept_with_empty_long_and_odd_lines(tiny_checkpoint, tmp_path, capsys):
    long_line = " ".join(["katze"] * 400)  # 400 pieces > max_positions=256
    lines = [
        "der hund",
        "",
        "   ",
        long_line,
        "e\u0301 \u00e9 👩‍👩‍👧 \u202eabc\u202c שלום 漢字",
        "ein baum\u2028neben dem haus",
        "tab\tinside\x00nul\x0bvt\x0cff\x1c\x85",
        "\ufeffbom",
        "das haus\r",
        "\U0001f600" * 50,
        "",
        "blau",
    ]
    src = tmp_path / "in.txt"
    src.write_bytes("\n".join(lines).encode("utf-8") + b"\n")
    out = tmp_path / "out.txt"
    assert cli(tiny_checkpoint, "-i", src, "-o", out, *FAST, "--max-words", "0") == 0  # 0: truncated, not cut
    result = out.read_bytes().decode("utf-8").split("\n")
    assert len(result) == len(lines) + 1 and result[-1] == ""
    for line, hyp in zip(lines, result):
        assert (hyp == "") == (line.strip() == "")
    err = capsys.readouterr().err
    assert "warning: line 4: 400 pieces, truncated to 255" in err
    # the same through stdin/stdout, with no final newline on the input
    sys_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO("\n".join(lines).encode("utf-8")))
    try:
        assert cli(tiny_checkpoint, *FAST, "--max-words", "0") == 0
    finally:
        sys.stdin = sys_stdin
    assert capsys.readouterr().out.split("\n") == result


def test_invalid_utf8_names_the_line(tiny_checkpoint, tmp_path):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"der hund\n\nein \xff baum\n")
    with pytest.raises(TranslateError, match=r"line 3: invalid UTF-8 \(byte 0xff at column 5\)"):
        cli(tiny_checkpoint, "-i", src, "-o", tmp_path / "o.txt", *FAST)
    assert cli(tiny_checkpoint, "-i", src, "-o", tmp_path / "o.txt", "--errors", "replace", *FAST) == 0
    assert len((tmp_path / "o.txt").read_text(encoding="utf-8").split("\n")) == 4


LINES = [
    "der hund",
    "",
    "ein baum und eine katze",
    "blau rot gross",
    "die katze springt auf den baum",
    "das haus neben dem baum",
    "eine kleine katze und ein grosser hund",
]


SEARCH = dict(beam=2, max_len_a=0, max_len_b=4)


def test_ensemble_cli_output_equals_the_api_ensemble(tiny_checkpoint, tmp_path):
    """`nmt translate A B` writes what Translator.load([A, B]).translate gives for the same lines;
    on these lines that differs from each member's own output, so the CLI really ensembles."""
    torch.manual_seed(1)
    cfg = tiny(100)
    other = save(
        tmp_path / "other",
        model=Transformer(cfg),
        spm_model=tiny_checkpoint / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": {}},
    )
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert (
        cli(
            tiny_checkpoint,
            other,
            "-i",
            src,
            "-o",
            tmp_path / "out.txt",
            "--precision",
            "fp32",
            "--device",
            "cpu",
            *FAST,
        )
        == 0
    )
    got = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    api = Translator.load([tiny_checkpoint, other], device="cpu", precision="fp32").translate(LINES, **SEARCH)
    assert got == api + [""]
    for member in (tiny_checkpoint, other):
        assert api != Translator.load(member, device="cpu", precision="fp32").translate(LINES, **SEARCH)


def test_int8_cli_output_equals_the_api_int8_output(tiny_checkpoint, tmp_path):
    """`nmt translate --precision int8` writes Translator.load(precision="int8")'s translations
    and n-best scores (to the 4 decimals it prints), which are not float32's: int8 is in use."""
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    q = Translator.load(tiny_checkpoint, precision="int8")
    assert cli(tiny_checkpoint, "-i", src, "-o", tmp_path / "out.txt", "--precision", "int8", *FAST) == 0
    got = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert got == q.translate(LINES, **SEARCH) + [""]
    assert (
        cli(
            tiny_checkpoint,
            "-i",
            src,
            "-o",
            tmp_path / "nb.txt",
            "--precision",
            "int8",
            "--nbest",
            "2",
            "--no-guards",  # the search's n-best as it gave them
            *FAST,
        )
        == 0
    )
    nbest = q.translate_nbest(LINES, nbest=2, **SEARCH)
    assert (tmp_path / "nb.txt").read_text(encoding="utf-8").splitlines() == [
        f"{n}\t{t.score:.4f}\t{t.text}" for n, r in enumerate(nbest, start=1) for t in r
    ]
    fp32 = Translator.load(tiny_checkpoint, device="cpu", precision="fp32").translate_nbest(
        LINES, nbest=2, **SEARCH
    )
    assert [f"{t.score:.4f}" for r in nbest for t in r] != [f"{t.score:.4f}" for r in fp32 for t in r]


@pytest.mark.parametrize("suffix", [".html", ".md", ".docx"])
@pytest.mark.parametrize(
    "options, named",
    [
        (("--nbest", "2"), "--nbest"),
        (("--alignment",), "--alignment"),
        (("--prefix-file", "{prefix}"), "--prefix-file"),
        (("--constraints", "{constraints}"), "--constraints"),
        (("--sampling", "--beam", "1"), "--sampling"),
        (("--nbest", "2", "--alignment"), "--nbest, --alignment"),
    ],
)
def test_a_document_refuses_the_options_of_one_output_per_line(tmp_path, capsys, suffix, options, named):
    """A document (-i FILE.html/.md/.docx) is translated whole: --nbest, --alignment, --prefix-file,
    --constraints and --sampling (one output per input line) are one line naming them, exit 2,
    before the checkpoint is read (there is none here), and nothing is written."""
    from nmt.cli import main

    doc = tmp_path / f"in{suffix}"
    doc.write_bytes(b"<p>der hund</p>\n")  # never read: refused first
    files = {"prefix": tmp_path / "prefix.txt", "constraints": tmp_path / "c.txt"}
    for path in files.values():
        path.write_text("der\n", encoding="utf-8")
    argv = [o.format(**files) for o in options]
    out = tmp_path / f"out{suffix}"
    assert main(["translate", str(tmp_path / "none"), "-i", str(doc), "-o", str(out), *FAST, *argv]) == 2
    assert capsys.readouterr().err == (
        f"nmt translate: error: {doc}: a document is translated whole: not with {named}\n"
    )
    assert not out.exists()
