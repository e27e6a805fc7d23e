"""`nmt plot RUN_DIR`: the curves of a run's metrics.jsonl."""

from __future__ import annotations

from nmt.cli import main


def test_a_corrupt_metrics_line_is_an_error_naming_the_file_and_line(tmp_path, capsys):
    """A line that is not JSON (e.g. cut by a crash) is one user error naming file and line (was:
    'internal error: ValueError ... this is a bug in nmt')."""
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "loss": 5.0, "ppl": 100, "lr": 0.001}\n{"step": 2, "lo'
    )
    assert main(["plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"nmt plot: error: {tmp_path / 'metrics.jsonl'}:2: not a JSON line\n"
    assert not (tmp_path / "loss.png").exists()
