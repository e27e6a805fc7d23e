"""nmt/cli.py, the argparse front end: nonsense counts refused, an unexpected exception one line unless
--debug."""

from __future__ import annotations

import pytest

from nmt.cli import main


@pytest.mark.parametrize(
    "argv,message",
    [
        (["average", "RUN", "--last", "0", "--out", "OUT"], "--last 0: must be a positive number"),
        (["average", "RUN", "--last", "-2", "--out", "OUT"], "--last -2: must be a positive number"),
        (["model-info", "--preset", "tiny", "--vocab-size", "0"], "0 must be a positive integer"),
    ],
)
def test_nonsense_counts_are_refused(finished_run_copy, tmp_path, capsys, argv, message):
    argv = [
        str(finished_run_copy) if a == "RUN" else str(tmp_path / "avg") if a == "OUT" else a for a in argv
    ]
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse: usage error, status 2
        rc = e.code
    assert rc == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "avg").exists()


# ----------------------------------------------------------------------------- the CLI's last resort
def test_unexpected_exception_is_one_line_unless_debug(monkeypatch, capsys):
    import nmt.cli

    def boom(args, overrides):
        raise RuntimeError("something nobody expected")

    monkeypatch.setattr(nmt.cli, "run_score", boom)
    assert main(["score", "hyp.txt", "--ref", "ref.txt"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "nmt score: internal error: RuntimeError: something nobody expected; this is a bug in nmt: please "
        "report it on the nmt issue tracker with the command line (rerun with --debug for the traceback)"
    ]
    for argv in (
        ["--debug", "score", "hyp.txt", "--ref", "ref.txt"],
        ["score", "hyp.txt", "--ref", "ref.txt", "--debug"],
    ):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and "RuntimeError: something nobody expected" in err


def test_a_reader_that_stops_reading_ends_the_command_quietly(tmp_path):
    """`nmt score ... | head -0`: stdout's reader gone, the command stops with 141 (128 + SIGPIPE) and
    no 'internal error', as a Unix tool does."""
    import subprocess
    import sys

    lines = "".join(f"ein hund {i} läuft\n" for i in range(2000))
    (tmp_path / "hyp").write_text(lines)
    (tmp_path / "ref").write_text(lines)
    cmd = [sys.executable, "-m", "nmt", "score", "--ref", str(tmp_path / "ref"), str(tmp_path / "hyp")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader goes away before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and "internal error" not in err, err
