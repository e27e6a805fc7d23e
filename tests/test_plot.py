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


def test_records_are_read_with_their_update_and_those_of_older_runs_with_their_step(tmp_path):
    """metrics.jsonl of a run begun when records said "step" and resumed since (its later records say
    "update"): every record is read with its "update", and `nmt plot` draws them all."""
    from nmt.train.plot import read_metrics

    (tmp_path / "metrics.jsonl").write_text(
        '{"split": "train", "step": 1, "loss": 5.0, "ppl": 100, "lr": 0.001}\n'
        '{"split": "valid", "step": 2, "loss": 4.5, "ppl": 90}\n'
        '{"split": "train", "update": 3, "loss": 4.0, "ppl": 55, "lr": 0.002}\n'
        '{"split": "valid", "update": 4, "loss": 3.5, "ppl": 33}\n'
    )
    train, valid = read_metrics(tmp_path)
    assert [r["update"] for r in train] == [1, 3] and [r["update"] for r in valid] == [2, 4]
    assert main(["plot", str(tmp_path)]) == 0
    assert all((tmp_path / f"{name}.png").exists() for name in ("loss", "ppl", "lr"))
