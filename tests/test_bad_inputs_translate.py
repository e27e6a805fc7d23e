"""Bad inputs walked through `nmt translate` and `nmt score`: each gives
exit status 2 and one line `nmt COMMAND: error: ...` naming the culprit (file or option), no
traceback, nothing translated, and no output file (an existing one is left as it was)."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nmt.cli import main as nmt_main

REPO = Path(__file__).resolve().parents[1]


def files(tmp: Path) -> dict:
    """The inputs the table refers to, by name."""
    (tmp / "in.txt").write_text("der hund\nein baum\n", encoding="utf-8")
    (tmp / "bad_utf8.txt").write_bytes(b"der hund\nein \xff baum\n")
    (tmp / "truncated.gz").write_bytes(gzip.compress(b"der hund\n" * 100)[:30])
    (tmp / "a_file").write_text("x\n")
    (tmp / "adir").mkdir()
    (tmp / "ref.txt").write_text("the dog\na tree\n", encoding="utf-8")
    (tmp / "ref3.txt").write_text("the dog\na tree\nmore\n", encoding="utf-8")
    (tmp / "notckpt").mkdir()
    return {
        "in": tmp / "in.txt",
        "bad_utf8": tmp / "bad_utf8.txt",
        "truncated": tmp / "truncated.gz",
        "a_file": tmp / "a_file",
        "adir": tmp / "adir",
        "ref": tmp / "ref.txt",
        "ref3": tmp / "ref3.txt",
        "notckpt": tmp / "notckpt",
        "missing": tmp / "missing.txt",
        "out": tmp / "out" / "hyp.txt",
    }


# (id, argv after the command with {names} from `files` and {ckpt}, text the error line must contain)
TRANSLATE = [
    ("checkpoint missing", ["{missing}", "-i", "{in}", "-o", "{out}"], "{missing}"),
    ("checkpoint not one", ["{notckpt}", "-i", "{in}", "-o", "{out}"], "{notckpt}"),
    ("input missing", ["{ckpt}", "-i", "{missing}", "-o", "{out}"], "{missing}"),
    ("input a directory", ["{ckpt}", "-i", "{adir}", "-o", "{out}"], "{adir}"),
    (
        "input invalid utf-8",
        ["{ckpt}", "-i", "{bad_utf8}", "-o", "{out}"],
        "{bad_utf8}: line 2: invalid UTF-8",
    ),
    ("input truncated gzip", ["{ckpt}", "-i", "{truncated}", "-o", "{out}"], "{truncated}"),
    ("output a directory", ["{ckpt}", "-i", "{in}", "-o", "{adir}"], "{adir}: is a directory"),
    ("output folder missing", ["{ckpt}", "-i", "{in}", "-o", "{missing}/hyp.txt"], "{missing}"),
    ("output under a file", ["{ckpt}", "-i", "{in}", "-o", "{a_file}/hyp.txt"], "{a_file}"),
    ("max-len-a nan", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--max-len-a", "nan"], "--max-len-a nan"),
    ("max-len-a negative", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--max-len-a", "-1"], "--max-len-a"),
    ("max-len-b negative", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--max-len-b", "-100"], "--max-len-b"),
    ("alpha inf", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--alpha", "inf"], "--alpha inf"),
    ("beam 0", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--beam", "0"], "--beam 0"),
    ("nbest over beam", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--beam", "2", "--nbest", "3"], "--nbest 3"),
    ("batch-tokens 0", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--batch-tokens", "0"], "--batch-tokens 0"),
    ("threads negative", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--threads", "-2"], "--threads -2"),
    ("device bogus", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--device", "bogus"], "--device bogus"),
    ("device cuda without gpu", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--device", "cuda"], "--device cuda"),
    (
        "fp16 on cpu",
        ["{ckpt}", "-i", "{in}", "-o", "{out}", "--device", "cpu", "--precision", "fp16"],
        "--precision fp16",
    ),
    ("config override", ["{ckpt}", "-i", "{in}", "-o", "{out}", "--model.d_model=8"], "--model.d_model"),
]
SCORE = [
    ("hyp missing", ["{missing}", "--ref", "{ref}"], "{missing}"),
    ("ref missing", ["{in}", "--ref", "{missing}"], "{missing}"),
    ("hyp invalid utf-8", ["{bad_utf8}", "--ref", "{ref}"], "{bad_utf8}: line 2: invalid UTF-8"),
    ("line counts differ", ["{in}", "--ref", "{ref3}"], "{ref3}"),
    ("ref a directory", ["{in}", "--ref", "{adir}"], "{adir}"),
]


def fill(items: list[str], names: dict) -> list[str]:
    return [s.format(**{k: str(v) for k, v in names.items()}) for s in items]


@pytest.mark.parametrize(
    "command,argv,names_it",
    [("translate", *row[1:]) for row in TRANSLATE] + [("score", *row[1:]) for row in SCORE],
    ids=[f"translate: {r[0]}" for r in TRANSLATE] + [f"score: {r[0]}" for r in SCORE],
)
def test_bad_input_is_one_line_exit_2(
    command, argv, names_it, tiny_checkpoint, tmp_path, capsys, monkeypatch
):
    import nmt.infer.translate as tr

    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("a GPU is present: --device cuda is valid here")

    def no_translation(*a, **k):
        raise AssertionError("translated before the bad input was found")

    monkeypatch.setattr(tr.Translator, "translate_nbest", no_translation)
    names = {**files(tmp_path), "ckpt": tiny_checkpoint}
    names["out"].parent.mkdir()
    before = sorted(p.name for p in names["out"].parent.iterdir())
    if command == "translate":
        argv = [*argv, "--quiet"]
    assert nmt_main([command, *fill(argv, names)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1, captured.err
    assert err[0].startswith(f"nmt {command}: error: ") and fill([names_it], names)[0] in err[0], err[0]
    assert "Traceback" not in captured.err + captured.out
    assert sorted(p.name for p in names["out"].parent.iterdir()) == before  # nothing written


def test_existing_output_is_left_whole(tiny_checkpoint, tmp_path, capsys):
    """An error (here invalid UTF-8 in the input) leaves an existing -o file as it was, and a
    good run replaces it whole (written to a temporary file, then renamed)."""
    names = files(tmp_path)
    out = tmp_path / "hyp.txt"
    out.write_text("old\n")
    assert (
        nmt_main(["translate", str(tiny_checkpoint), "-i", str(names["bad_utf8"]), "-o", str(out), "--quiet"])
        == 2
    )
    assert out.read_text() == "old\n"
    assert (
        nmt_main(
            [
                "translate",
                str(tiny_checkpoint),
                "-i",
                str(names["in"]),
                "-o",
                str(out),
                "--quiet",
                "--max-len-a",
                "0",
                "--max-len-b",
                "3",
            ]
        )
        == 0
    )
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_bad_input_end_to_end(tiny_checkpoint, tmp_path):
    """The same through a real `python -m nmt` process: exit status 2, one line, no traceback."""
    argv = ["translate", "{ckpt}", "-i", "{in}", "-o", "{adir}", "--device", "cpu", "--quiet"]
    names_it = "{adir}: is a directory"
    names = {**files(tmp_path), "ckpt": tiny_checkpoint}
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "nmt", *fill(argv, names)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith(f"nmt {argv[0]}: error: ")
        and fill([names_it], names)[0] in err[0]
    ), proc.stderr
