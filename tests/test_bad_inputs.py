"""A table of bad inputs walked through the CLI (prepare, train, average, score): each gives exit
status 2 and one line `nmt COMMAND: error: ...` naming the file, no traceback, and writes nothing.
(`nmt translate`'s rows live with the translate tests.)"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from train_fixtures import tiny_args

from nmt import checkpoint as ckpt
from nmt.cli import main

TINY = tiny_args("--train.max_tokens=512", "--train.max_steps=1")


@pytest.fixture(scope="module")
def one_update_run(tiny_data, tmp_path_factory):
    """A tiny run finished after one update (step_1 and best)."""
    out = tmp_path_factory.mktemp("bad") / "run"
    assert main(["train", str(tiny_data), "--out", str(out), *TINY, "--train.save_every_steps=1"]) == 0
    return out


def rewrite_manifest(directory: Path) -> None:
    manifest = {
        f.name: {"sha256": hashlib.sha256(f.read_bytes()).hexdigest(), "bytes": f.stat().st_size}
        for f in sorted(directory.iterdir())
        if f.name != ckpt.MANIFEST
    }
    (directory / ckpt.MANIFEST).write_text(json.dumps(manifest))


# Each row: (id, setup(w) -> argv, the file the message must name (relative to w or absolute)).
# `w` is a folder holding: text/ (good train files), data (prepared), run (a finished run).
def text(w, name, content: bytes):
    (w / "text" / name).write_bytes(content)
    return str(w / "text" / name)


def prepare_args(w, *train, extra=()):
    return [
        "prepare",
        "files",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(w / "new"),
        "--train",
        *train,
        "--vocab-size",
        "60",
        "--threads",
        "1",
        *extra,
    ]


def good(w):
    return str(w / "text" / "train.en"), str(w / "text" / "train.de")


def corrupt(w, name):
    path = ckpt.list_step_checkpoints(w / "run")[-1] / name
    path.write_bytes(path.read_bytes()[:-5] + b"XXXXX")
    return str(path)


def replace_and_rewrite(w, name, content: bytes):
    directory = ckpt.list_step_checkpoints(w / "run")[-1]
    (directory / name).write_bytes(content)
    rewrite_manifest(directory)
    return str(directory / name)


ROWS = [
    ("prepare: train is a directory", lambda w: (prepare_args(w, str(w / "text"), good(w)[1]), "text")),
    ("prepare: train missing", lambda w: (prepare_args(w, str(w / "nope.en"), good(w)[1]), "nope.en")),
    (
        "prepare: invalid UTF-8",
        lambda w: (prepare_args(w, text(w, "bad.en", b"ok\n\xff\xfe\n"), good(w)[1]), "bad.en"),
    ),
    (
        "prepare: truncated gzip",
        lambda w: (
            prepare_args(w, text(w, "cut.en.gz", gzip.compress(b"a\n" * 999)[:30]), good(w)[1]),
            "cut.en.gz",
        ),
    ),
    (
        "prepare: line counts differ",
        lambda w: (prepare_args(w, text(w, "short.en", b"one line\n"), good(w)[1]), "short.en"),
    ),
    (
        "prepare: vocab size 0",
        lambda w: (prepare_args(w, *good(w))[:-4] + ["--vocab-size", "0"], "--vocab-size"),
    ),
    (
        "prepare: out exists",
        lambda w: (prepare_args(w, *good(w))[:7] + [str(w / "data")] + prepare_args(w, *good(w))[8:], "data"),
    ),
    (
        "train: data not prepared",
        lambda w: (["train", str(w / "text"), "--out", str(w / "new"), *TINY], "text"),
    ),
    (
        "train: misspelled section",
        lambda w: (
            [
                "train",
                str(w / "data"),
                "--out",
                str(w / "new"),
                *TINY,
                "--config",
                text(w, "c.yaml", b"trian:\n  max_steps: 5\n"),
            ],
            "c.yaml",
        ),
    ),
    (
        "train: invalid YAML",
        lambda w: (
            [
                "train",
                str(w / "data"),
                "--out",
                str(w / "new"),
                *TINY,
                "--config",
                text(w, "y.yaml", b"model: [\n"),
            ],
            "y.yaml",
        ),
    ),
    (
        "train: config is a list",
        lambda w: (
            [
                "train",
                str(w / "data"),
                "--out",
                str(w / "new"),
                *TINY,
                "--config",
                text(w, "l.yaml", b"- 1\n- 2\n"),
            ],
            "l.yaml",
        ),
    ),
    (
        "train: resume, altered weights",
        lambda w: (
            ["train", str(w / "data"), "--out", str(w / "run"), "--resume", "--train.max_steps=2"],
            corrupt(w, "model.safetensors"),
        ),
    ),
    (
        "train: resume, trainer_state not an object",
        lambda w: (
            ["train", str(w / "data"), "--out", str(w / "run"), "--resume", "--train.max_steps=2"],
            replace_and_rewrite(w, "trainer_state.json", b"[1, 2]"),
        ),
    ),
    (
        "train: resume, trainer_state missing keys",
        lambda w: (
            ["train", str(w / "data"), "--out", str(w / "run"), "--resume", "--train.max_steps=2"],
            replace_and_rewrite(w, "trainer_state.json", b'{"step": 1}'),
        ),
    ),
    (
        "train: resume, optimizer not safetensors",
        lambda w: (
            ["train", str(w / "data"), "--out", str(w / "run"), "--resume", "--train.max_steps=2"],
            replace_and_rewrite(w, "optimizer.safetensors", b"\x00" * 64),
        ),
    ),
    (
        "train: resume, run config.json not JSON",
        lambda w: (
            ["train", str(w / "data"), "--out", str(w / "run"), "--resume", "--train.max_steps=2"],
            text(w, "../run/config.json", b"{not json"),
        ),
    ),
    ("average: no such run", lambda w: (["average", str(w / "nope"), "--out", str(w / "new")], "nope")),
    (
        "average: altered weights",
        lambda w: (
            ["average", str(w / "run"), "--last", "1", "--out", str(w / "new")],
            corrupt(w, "model.safetensors"),
        ),
    ),
    (
        "average: out is the run",
        lambda w: (["average", str(w / "run"), "--last", "1", "--out", str(w / "run"), "--force"], "run"),
    ),
    (
        "score: hypotheses missing",
        lambda w: (["score", str(w / "nope.txt"), "--ref", good(w)[1]], "nope.txt"),
    ),
    ("score: reference missing", lambda w: (["score", good(w)[0], "--ref", str(w / "nope.de")], "nope.de")),
    (
        "score: line counts differ",
        lambda w: (["score", text(w, "one.txt", b"a line\n"), "--ref", good(w)[1]], "one.txt"),
    ),
    (
        "score: invalid UTF-8",
        lambda w: (["score", text(w, "bad.txt", b"\xff\n"), "--ref", good(w)[1]], "bad.txt"),
    ),
    ("score: reference is a directory", lambda w: (["score", good(w)[0], "--ref", str(w / "text")], "text")),
]


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_exit_2_nothing_written(row, tiny_data, one_update_run, tmp_path, capsys):
    from train_fixtures import write_corpus

    w = tmp_path
    write_corpus(w / "text", n_train=60, n_valid=5)
    shutil.copytree(tiny_data, w / "data")
    shutil.copytree(one_update_run, w / "run")
    argv, named = row[1](w)
    before = tree(w)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    command = argv[0]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"nmt {command}: error:") and Path(named).name in lines[0], lines[0]
    assert "Traceback" not in err
    assert tree(w) == before  # nothing written, nothing half-written, nothing deleted


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    """Ctrl-C in a command without its own handler (here `nmt score`; nmt train and nmt serve have
    theirs): a one-line message and the shell's exit status 130, not a traceback."""

    def interrupted(args, overrides):
        raise KeyboardInterrupt

    monkeypatch.setattr("nmt.cli.run_score", interrupted)
    assert main(["score", "--ref", "r.txt", "h.txt"]) == 130
    err = capsys.readouterr().err
    assert err == "nmt score: interrupted (Ctrl-C)\n"
